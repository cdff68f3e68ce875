//! Fault records: how a receiver that refused a write which rode in a
//! message (see [`crate::eager`]) tells the writer which write and why,
//! before the connection ends.
//!
//! Each endpoint's control words (registered for the peer's remote
//! writes, their key and address in the connection's private data) hold,
//! after the goodbye word and its source, a three-word record the peer may
//! write (`FAULT | status << 32`, the write's sequence number, its
//! cookie) and this side's own record's source. The refusing side writes
//! its record, waits (boundedly) for that write to complete and then ends
//! the connection; the writer, as its connection ends, finds the record,
//! reports the refused write with its status and cookie (its record
//! dropped, so that the flush does not report it again) and names the
//! refusal as the reason the connection broke.

use crate::dto::TxKind;
use crate::ep::EpShared;
use crate::msg::{self, Iov, Remote};
use rmr_api::{Cookie, DtoCompletion, DtoFlags, DtoOp, Event, Result, Status};
use smallvec::SmallVec;
use std::time::{Duration, Instant};

/// Bytes of an endpoint's control words.
pub(crate) const CTL_LEN: usize = 80;
/// Where the peer writes its fault record.
const PEER_AT: u64 = 16;
/// Where this side's record is staged.
const OWN_AT: u64 = 40;
/// A fault record's first word, below its status.
const FAULT: u64 = 0x544c_5546; // "FULT"
/// How long the refusing side waits for its record's write.
const SEND_FOR: Duration = Duration::from_secs(1);

fn code(s: Status) -> u64 {
    match s {
        Status::BadKey => 1,
        Status::RemoteAccess => 2,
        _ => 3,
    }
}

fn status(code: u64) -> Status {
    match code {
        1 => Status::BadKey,
        2 => Status::RemoteAccess,
        _ => Status::OutOfBounds,
    }
}

impl EpShared {
    /// Notes that a write that rode in a message was refused with `s`:
    /// nothing more is applied, and the record goes to the peer as the
    /// connection ends.
    pub(crate) fn refuse(&self, s: Status, seq: u64, cookie: u64) {
        self.stop_taking();
        let mut c = self.lock_conn();
        if c.fault.is_none() {
            c.fault = Some([FAULT | code(s) << 32, seq, cookie]);
        }
    }

    /// Writes this side's fault record, if there is one, into the peer's
    /// control words and waits for the write (at most [`SEND_FOR`]).
    pub(crate) fn send_fault(&self) {
        let (fault, peer) = {
            let mut c = self.lock_conn();
            (c.fault.take(), c.peer_ctl)
        };
        let (Some(f), Some((key, addr))) = (fault, peer) else { return };
        for (i, w) in f.iter().enumerate() {
            let _ = self.ctl.store_u64(OWN_AT + 8 * i as u64, *w);
        }
        let r = Remote { addr: addr + PEER_AT, len: 24, key };
        if self.post_ctl(r, OWN_AT as usize, TxKind::Fault).is_err() {
            return;
        }
        let deadline = Instant::now() + SEND_FOR;
        while !self.lock_conn().fault_done && Instant::now() < deadline {
            if !self.req.progress(Duration::from_millis(5)) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// The peer's fault record, if it wrote one: the refused write is
    /// reported (once) and the reason the connection broke returned.
    pub(crate) fn peer_fault(&self) -> Option<String> {
        let w0 = self.ctl.load_u64(PEER_AT).ok()?;
        if w0 & 0xffff_ffff != FAULT {
            return None;
        }
        let seq = self.ctl.load_u64(PEER_AT + 8).ok()?;
        let cookie = self.ctl.load_u64(PEER_AT + 16).ok()?;
        let s = status(w0 >> 32);
        self.drop_record(seq, cookie);
        let d = DtoCompletion::new(self.id, Cookie(cookie), DtoOp::RdmaWrite, s, 0);
        self.req.push(Event::Dto(d));
        Some(format!(
            "the peer refused an RDMA write that rode in a message ({s:?}: {})",
            crate::eager::refusal(s)
        ))
    }

    /// The goodbye mark of an orderly disconnect (see [`crate::ep`]).
    pub(crate) fn post_bye(&self, key: u64, addr: u64) -> Result<()> {
        self.post_ctl(Remote { addr, len: 8, key }, 8, TxKind::Bye)
    }

    /// An RDMA write of `r.len` bytes from the control words at `from`
    /// into the peer's (a goodbye mark, a fault record), or for a probe
    /// (see [`crate::order`]) a read of the peer's into ours at `from`.
    pub(crate) fn post_ctl(&self, r: Remote, from: usize, kind: TxKind) -> Result<()> {
        let desc = if self.ia.feat.mr_local { self.ctl_mr.desc() } else { 0 };
        let iov = [Iov { addr: self.ctl.as_ptr() as usize + from, len: r.len as usize, desc }];
        let keep = SmallVec::from_elem(self.ctl.clone(), 1);
        let read = kind == TxKind::Probe;
        let op = if read { DtoOp::RdmaRead } else { DtoOp::RdmaWrite };
        let mut meta = self.user_meta(0, op, DtoFlags::SUPPRESS, r.len, keep);
        // Not the user's: always signalled (see `post_tx`), never reported.
        meta.kind = kind;
        self.post_tx(
            meta,
            0,
            None,
            // SAFETY: the control region lives as long as the endpoint.
            &mut |ep, tok, fl, _, _| unsafe { msg::rma(ep, read, &iov, r, tok, 0, fl) },
            if read { "fi_readmsg" } else { "fi_writemsg" },
        )
    }

    /// Drops the record of the suppressed write (or write with
    /// immediate) that rode, numbered `seq` (its low 32 bits) with
    /// `cookie`, if still there: a refused write, reported by
    /// [`crate::fault`], must not be flushed again. Its header buffer is
    /// dropped, not reused (the endpoint is still open).
    pub(crate) fn drop_record(&self, seq: u64, cookie: u64) {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let at = tx.q.iter().position(|m| m.rode_as(seq, cookie));
        if let Some(i) = at {
            tx.q.remove(i);
        }
    }
}
