//! The receive side of the data path: posting receives (staged in pooled
//! bounce buffers where the provider needs no local registration) and
//! turning their completions back into events: a message's header (see
//! [`crate::eager`]) is read and the writes that rode in it placed before
//! its receive completes.

use crate::cq::Cqe;
use crate::dto::{LEN_MASK, SEQ_MASK, Segs, token};
use crate::eager::{self, Entry, HDR_MAX, KIND_IMM, KIND_SHIFT, KIND_SOLICITED};
use crate::ep::EpShared;
use crate::ffi::{EAGAIN, fi_error};
use crate::msg::{self, Iov};
use ofi_sys as sys;
use rmr_api::{Access, DtoCompletion, DtoFlags, DtoOp, Error, Event, Result, Sge, Status};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub(crate) struct RxMeta {
    seq: u64,
    pub(crate) cookie: u64,
    segs: Segs,
    total: u64,
    /// Where the message lands first: the whole of it (`whole`), or its
    /// first [`HDR_MAX`] bytes, the rest going to the user's segments.
    bounce: Option<Vec<u8>>,
    whole: bool,
    iov: SmallVec<[Iov; 4]>,
    posted: bool,
}

#[derive(Default)]
pub(crate) struct RxState {
    next_seq: u64,
    pub(crate) q: VecDeque<RxMeta>,
}

/// Bounce buffers an endpoint keeps for reuse (receives in flight at once
/// beyond this allocate).
pub(crate) const BOUNCE_POOL: usize = 64;

impl EpShared {
    /// A bounce buffer of at least `need` bytes: from the endpoint's pool
    /// (no allocation in steady state), else a new one of the next power of
    /// two. Its bytes are not cleared: a receive overwrites what it reports.
    fn take_bounce(&self, need: usize) -> Vec<u8> {
        let mut pool = self.bounces.lock().unwrap_or_else(|e| e.into_inner());
        match pool.iter().position(|b| b.len() >= need) {
            Some(i) => pool.swap_remove(i),
            None => vec![0u8; need.next_power_of_two()],
        }
    }

    /// Returns a bounce buffer to the pool (at most [`BOUNCE_POOL`] kept).
    fn give_bounce(&self, b: Vec<u8>) {
        let mut pool = self.bounces.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < BOUNCE_POOL {
            pool.push(b);
        }
    }

    fn post_one_recv(&self, ep: &crate::ffi::EpH, m: &RxMeta) -> isize {
        // SAFETY: the record (bounce buffer or the regions in `segs`) outlives the receive.
        unsafe {
            let idx = self.rx_idx.load(Ordering::Relaxed);
            msg::recv(ep, &m.iov, token(idx, true, m.seq), sys::FI_COMPLETION as u64)
        }
    }

    pub(crate) fn post_recv(&self, local: &[Sge<'_>], cookie: u64, _flags: DtoFlags) -> Result<()> {
        let (mut iov, _, total) = self.check_sges(local, Access::LOCAL_WRITE)?;
        match self.state() {
            rmr_api::EpState::Disconnected | rmr_api::EpState::Broken => {
                return Err(Error::NotConnected);
            }
            _ => {}
        }
        let f = &self.ia.feat;
        // The record holds the regions the provider writes into: the iov is
        // made again from them (one read of each LMR, checked), not from
        // `check_sges`' own read, so what the provider writes to is what
        // the record keeps alive whatever an LMR answers a second time.
        let mut segs = Segs::new();
        for s in local.iter().filter(|s| s.len > 0) {
            let (region, off) = rmr_api::provider::seg_place(s)?;
            segs.push((region.clone(), off, s.len));
        }
        for (i, (region, off, _)) in iov.iter_mut().zip(&segs) {
            i.addr = region.as_ptr() as usize + *off as usize;
        }
        // A message's header (see `crate::eager`) lands first: in the
        // bounce buffer, or in a slot before the user's segments.
        let pre = if f.eager { HDR_MAX } else { 0 };
        let (bounce, whole, iov) = if !f.mr_local && total <= f.bounce_max {
            let len = pre + total as usize + 1;
            let b = self.take_bounce(len);
            let i = Iov { addr: b.as_ptr() as usize, len, desc: 0 };
            (Some(b), true, SmallVec::from_elem(i, 1))
        } else if f.eager {
            let b = self.take_bounce(HDR_MAX);
            let mut v =
                SmallVec::from_elem(Iov { addr: b.as_ptr() as usize, len: HDR_MAX, desc: 0 }, 1);
            v.extend(iov);
            (Some(b), false, v)
        } else {
            (None, false, iov)
        };
        let mut m = RxMeta { seq: 0, cookie, segs, total, bounce, whole, iov, posted: false };
        for attempt in 0..3 {
            {
                let g = self.fid.read().unwrap_or_else(|e| e.into_inner());
                let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
                if rx.q.len() < f.rx_size {
                    m.seq = rx.next_seq;
                    if let Some(ep) = g.as_ref() {
                        let ret = self.post_one_recv(ep, &m);
                        if ret == 0 {
                            m.posted = true;
                        } else if ret != EAGAIN {
                            return Err(fi_error("fi_recvmsg", ret));
                        }
                    }
                    if m.posted || g.is_none() {
                        rx.next_seq += 1;
                        rx.q.push_back(m);
                        return Ok(());
                    }
                }
            }
            self.rcv.progress(if attempt == 0 { Duration::ZERO } else { Duration::from_millis(1) });
        }
        Err(Error::QueueFull)
    }

    /// Posts the receives queued before the endpoint existed, in order.
    pub(crate) fn post_pending_recvs(&self) -> Result<()> {
        let g = self.fid.read().unwrap_or_else(|e| e.into_inner());
        let Some(ep) = g.as_ref() else { return Ok(()) };
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..rx.q.len() {
            if !rx.q[i].posted {
                let ret = self.post_one_recv(ep, &rx.q[i]);
                if ret != 0 {
                    return Err(fi_error("fi_recvmsg", ret));
                }
                rx.q[i].posted = true;
            }
        }
        Ok(())
    }

    /// After a failed set-up closed the endpoint: its receives are pending again.
    pub(crate) fn unpost_recvs(&self) {
        if self.state() == rmr_api::EpState::Pending
            || self.state() == rmr_api::EpState::Unconnected
        {
            for m in self.rx.lock().unwrap_or_else(|e| e.into_inner()).q.iter_mut() {
                m.posted = false;
            }
        }
    }
    pub(crate) fn rx_complete(&self, seq: u64, c: &Cqe) -> (Option<Event>, Option<String>) {
        let m = {
            let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
            let Some(pos) = rx.q.iter().position(|m| m.seq & SEQ_MASK == seq) else {
                return (None, None);
            };
            match rx.q.remove(pos) {
                Some(m) => m,
                None => return (None, None),
            }
        };
        if c.err != 0 {
            let (status, why) = match c.err as u32 {
                sys::FI_ETRUNC | sys::FI_EMSGSIZE => {
                    (Status::RecvTooSmall, Some("message larger than the posted receive".into()))
                }
                sys::FI_ECANCELED => (Status::Flushed, None),
                _ => (Status::Broken, None),
            };
            if status != Status::Flushed {
                self.stop_taking();
            }
            return (Some(Event::Dto(self.dto(m.cookie, DtoOp::Recv, status, c.len))), why);
        }
        let r = self.take_message(&m, c);
        if let Some(b) = m.bounce {
            self.give_bounce(b);
        }
        match r {
            Ok(d) => (Some(Event::Dto(d)), None),
            Err((status, len, why)) => {
                self.stop_taking();
                (Some(Event::Dto(self.dto(m.cookie, DtoOp::Recv, status, len))), Some(why))
            }
        }
    }

    /// Takes in no later message: this one failed and the connection
    /// breaks (no later message's writes are placed, nor acknowledged).
    pub(crate) fn stop_taking(&self) {
        self.refused.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Reads a received message: its header (the writes that rode in it
    /// placed), its payload copied to the user's segments where it was
    /// staged. An error is the receive's status, the length to report and
    /// why the endpoint breaks.
    fn take_message(&self, m: &RxMeta, c: &Cqe) -> std::result::Result<DtoCompletion, Failed> {
        let bad =
            |why: String| (Status::Broken, 0, format!("malformed message from the peer: {why}"));
        if self.refused.load(std::sync::atomic::Ordering::Acquire) {
            // Nothing after a failed message is applied (see `crate::fault`).
            return Err((Status::Flushed, 0, "after a message that failed".into()));
        }
        let has_data = c.flags & sys::FI_REMOTE_CQ_DATA as u64 != 0;
        // Without rmr's header, an immediate's length rides in the data.
        let mut imm_len = None;
        let (kind, hlen, imm) = if !has_data {
            (0, 0, 0)
        } else if self.ia.feat.eager {
            eager::parse_cq_data(c.data).map_err(bad)?
        } else {
            imm_len = Some((c.data >> 32) & LEN_MASK);
            (c.data >> KIND_SHIFT, 0, c.data as u32)
        };
        let len = c.len;
        let n = len
            .checked_sub(hlen as u64)
            .ok_or_else(|| bad(format!("{len} bytes with a {hlen}-byte header")))?;
        if n > m.total {
            return Err((Status::RecvTooSmall, n, "message larger than the posted receive".into()));
        }
        // What landed in the staging buffer.
        let staged = match &m.bounce {
            Some(b) if m.whole => &b[..len as usize],
            Some(b) => {
                if len > HDR_MAX as u64 && hlen != HDR_MAX {
                    return Err(bad(format!("{len} bytes with a {hlen}-byte header")));
                }
                &b[..(len as usize).min(HDR_MAX)]
            }
            None => &[][..],
        };
        // The whole header is checked before any of it is applied.
        let entries = eager::entries(&staged[..hlen]).map_err(bad)?;
        for e in &entries {
            if let Entry::Imm { len } = e {
                imm_len = Some(*len);
            }
        }
        if kind == KIND_IMM && (imm_len.is_none() || n != 0) {
            return Err(bad("an immediate without its length, or with a payload".into()));
        }
        let mut last = None;
        for e in entries {
            match e {
                Entry::Write { w, data } => {
                    let placed = self
                        .pz
                        .eager_target(w.key, w.addr, data.len() as u64)
                        .and_then(|(lmr, off)| lmr.place(off, data));
                    if let Err(s) = placed {
                        self.refuse(s, w.seq, w.cookie);
                        let why = format!(
                            "refused an RDMA write of {} bytes to {:#x} that the peer sent \
                             in a message ({s:?}: {})",
                            data.len(),
                            w.addr,
                            eager::refusal(s)
                        );
                        return Err((Status::Flushed, 0, why));
                    }
                    last = Some(w.seq);
                }
                Entry::Ack { id } => self.confirmed(id),
                Entry::Imm { .. } => {}
            }
        }
        if let Some(id) = last {
            // Acknowledged in this side's next message (see `crate::order`).
            self.placed(id);
        }
        if kind == KIND_IMM {
            let wlen = imm_len.unwrap_or(0);
            let mut d = self.dto(m.cookie, DtoOp::RecvWriteImm, Status::Success, wlen);
            d.imm = Some(u64::from(imm));
            return Ok(d);
        }
        // The payload, where it was staged (a large one landed in place).
        let body = if m.whole || len <= HDR_MAX as u64 { &staged[hlen..] } else { &[][..] };
        let mut at = 0usize;
        for (r, off, l) in &m.segs {
            if at >= body.len() {
                break;
            }
            let k = (*l as usize).min(body.len() - at);
            let _ = r.write(*off, &body[at..at + k]);
            at += k;
        }
        let mut d = self.dto(m.cookie, DtoOp::Recv, Status::Success, n);
        d.solicited = kind == KIND_SOLICITED;
        Ok(d)
    }
}

/// A receive that failed: its status, the length to report and why the
/// endpoint breaks.
type Failed = (Status, u64, String);
