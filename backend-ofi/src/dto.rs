//! The data path: posting DTOs and turning CQ entries back into events.
//!
//! Every posted operation gets a sequence number and a record (cookie,
//! op, the memory it keeps alive) in its endpoint's transmit or receive
//! queue; its libfabric context is a *token* `endpoint index << 40 | rx bit
//! | seq`, never a pointer. SUPPRESS maps to FI_SELECTIVE_COMPLETION: a
//! suppressed send or write is posted without FI_COMPLETION and retired when
//! a later completion of the same endpoint arrives (libfabric completes
//! sends and writes of one FI_EP_MSG endpoint in order); every so often a
//! suppressed post carries a hidden FI_COMPLETION so the window drains even
//! when the user never asks for one. Reads and atomics always carry one.
//!
//! Receives of up to `RMR_OFI_BOUNCE_MAX` bytes are staged in a bounce
//! buffer one byte larger than the posted list (and a header's
//! [`HDR_MAX`] bytes larger where messages carry one, see
//! [`crate::eager`]): a message that does not fit fails with
//! `RecvTooSmall` and never touches the user's buffer.

use crate::cq::Cqe;
use crate::eager::{self, HDR_MAX, KIND_SHIFT, KIND_SOLICITED};
use crate::ep::EpShared;
use crate::ffi::{EAGAIN, fi_error};
use crate::lmr::OfiLmr;
use crate::msg::{self, Iov, Remote};
use ofi_sys as sys;
use rmr_api::Cookie;
use rmr_api::provider::check_local_sges;
use rmr_api::{
    Access, DtoCompletion, DtoFlags, DtoOp, Error, Event, MemRegion, Result, RmrContext, Sge,
    Status,
};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) const RX_BIT: u64 = 1 << 39;
pub(crate) const SEQ_MASK: u64 = RX_BIT - 1;

/// Where a provider carries no rmr header (see [`crate::eager`]): an
/// immediate's write length in the remote CQ data, bits 32-61.
pub(crate) const LEN_MASK: u64 = (1 << 30) - 1;

pub(crate) type Keep = SmallVec<[Arc<MemRegion>; 2]>;
pub(crate) type Segs = SmallVec<[(Arc<MemRegion>, u64, u64); 2]>;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxKind {
    User,
    Bye,
    /// A fault record (see [`crate::fault`]).
    Fault,
    /// A read of the peer's placed number (see [`crate::order`]).
    Probe,
}

pub(crate) struct TxMeta {
    pub(crate) seq: u64,
    pub(crate) cookie: u64,
    pub(crate) op: DtoOp,
    user_signal: bool,
    pub(crate) prov_signal: bool,
    read_like: bool,
    bytes: u64,
    pub(crate) kind: TxKind,
    #[allow(dead_code)]
    keep: Keep,
    /// Where an atomic's old value lands (region, offset).
    pub(crate) result: Option<(Arc<MemRegion>, u64)>,
    /// An atomic's operand and compare value (libfabric reads them until completion).
    #[allow(dead_code)]
    pub(crate) operand: Option<Box<[u64; 2]>>,
    /// An RDMA write (without immediate) that, if small, may wait in the
    /// socket for what follows (see [`crate::cork`]).
    pub(crate) corkable: bool,
    /// Payload bytes the operation puts on the wire (a read's or an
    /// immediate's request frame carries none, an atomic's its operands).
    pub(crate) wire: u64,
    /// A message's header (see [`crate::eager`]), or a held write's
    /// entry and data: libfabric reads it until the operation completes.
    pub(crate) hdr: Option<Vec<u8>>,
    /// The header's entries' length.
    pub(crate) hlen: usize,
    /// A held write not posted yet (the endpoint's last record), and
    /// where it goes.
    pub(crate) held: Option<Remote>,
    /// Where an RDMA operation posted as one goes: it waits for the
    /// writes that rode in messages and overlap it (see [`crate::order`]).
    pub(crate) target: Option<Remote>,
}

#[derive(Default)]
pub(crate) struct TxState {
    pub(crate) next_seq: u64,
    pub(crate) q: VecDeque<TxMeta>,
    /// Suppressed posts since the last one carrying a completion.
    pub(crate) blind: usize,
    /// Reads and atomics in flight (for a software BARRIER_FENCE).
    reads: usize,
    /// The connection's socket, where small writes are corked (see
    /// [`crate::cork`]).
    pub(crate) cork: Option<crate::cork::Cork>,
    /// Writes that rode in messages, not yet known placed by the peer
    /// (see [`crate::order`]).
    pub(crate) rides: VecDeque<crate::order::Ride>,
    /// Whether the last record is a held write (see [`crate::eager`]).
    pub(crate) holding: bool,
    /// Header buffers for reuse.
    hdrs: Vec<Vec<u8>>,
}

/// Header buffers an endpoint keeps for reuse.
const HDR_POOL: usize = 64;

impl TxMeta {
    /// Whether this is the record of a suppressed write that rode in a
    /// message, numbered `seq` (low 32 bits) with `cookie`.
    pub(crate) fn rode_as(&self, seq: u64, cookie: u64) -> bool {
        self.kind == TxKind::User
            && self.op == DtoOp::RdmaWrite
            && !self.user_signal
            && self.held.is_none()
            && self.seq & 0xffff_ffff == seq & 0xffff_ffff
            && self.cookie == cookie
    }
}

impl TxState {
    /// A header buffer of [`HDR_MAX`] bytes (its contents stale).
    pub(crate) fn take_hdr(&mut self) -> Vec<u8> {
        self.hdrs.pop().unwrap_or_else(|| vec![0; HDR_MAX])
    }

    /// Whether a post the user asked no completion of (`must` false)
    /// carries one anyway, so that the window drains, and the
    /// completion flags it then takes (`read_like`: no delivery-complete).
    pub(crate) fn signal(
        &self,
        must: bool,
        read_like: bool,
        f: &crate::ia::Features,
    ) -> (bool, u64) {
        let signal = must || self.blind + 1 >= (f.tx_size / 4).max(1);
        let mut flags = 0;
        if signal {
            flags |= sys::FI_COMPLETION as u64;
            if f.delivery_complete && !read_like {
                flags |= sys::FI_DELIVERY_COMPLETE as u64;
            }
        }
        (signal, flags)
    }

    /// Keeps a header buffer for reuse.
    pub(crate) fn give_hdr(&mut self, h: Vec<u8>) {
        if self.hdrs.len() < HDR_POOL && h.len() == HDR_MAX {
            self.hdrs.push(h);
        }
    }

    /// Drops a record, keeping its header buffer for reuse.
    pub(crate) fn recycle(&mut self, m: TxMeta) {
        if let Some(h) = m.hdr {
            self.give_hdr(h);
        }
    }

    /// Retires the suppressed records up to `seq` (a completion of the
    /// endpoint arrived for `seq`: sends and writes complete in order).
    fn retire_through(&mut self, seq: u64) {
        let mut i = 0;
        while i < self.q.len() {
            if !self.q[i].prov_signal && self.q[i].seq <= seq {
                if let Some(m) = self.q.remove(i) {
                    self.recycle(m);
                }
            } else {
                i += 1;
            }
        }
    }
}

/// How an operation is handed to libfabric: (endpoint, token, flags, the
/// message's header segment, its remote CQ data) to libfabric's answer.
pub(crate) type PostFn<'a> = dyn FnMut(&crate::ffi::EpH, u64, u64, Option<Iov>, u64) -> isize + 'a;

/// What a message adds to its post: its kind and immediate, its payload
/// bytes, the header entries of its own (an immediate's length, a write
/// that rides in it) and, where the provider carries no header, its
/// remote CQ data as is.
pub(crate) struct SendPart<'a> {
    pub(crate) kind: u64,
    pub(crate) imm: u32,
    pub(crate) n: u64,
    pub(crate) own: &'a [u8],
    pub(crate) plain: u64,
    /// Where in `own` a write entry starts whose id is the message's own
    /// sequence number (a write with immediate that rides in it), and
    /// where that write goes.
    pub(crate) patch: Option<usize>,
    pub(crate) ride: Option<Remote>,
}

/// Puts `add` at `b[base..]` (a header buffer of [`HDR_MAX`] bytes) and
/// returns the header's length on the wire: padded with zeros to a slot
/// when header and payload (`n` bytes) exceed one (see `crate::eager`).
fn fill(b: &mut [u8], base: usize, add: &[u8], n: u64) -> usize {
    let hlen = base + add.len();
    b[base..hlen].copy_from_slice(add);
    if hlen as u64 + n > HDR_MAX as u64 {
        b[hlen..HDR_MAX].fill(0);
        HDR_MAX
    } else {
        hlen
    }
}

pub(crate) fn token(idx: u32, rx: bool, seq: u64) -> u64 {
    (u64::from(idx) << 40) | if rx { RX_BIT } else { 0 } | (seq & SEQ_MASK)
}

/// Maps a libfabric errno of a transmit-side completion to an rmr status.
fn tx_status(err: i32) -> Status {
    match err as u32 {
        sys::FI_ECANCELED => Status::Flushed,
        sys::FI_EACCES | sys::FI_EPERM | sys::FI_EREMOTEIO => Status::RemoteAccess,
        sys::FI_EKEYREJECTED | sys::FI_ENOKEY => Status::BadKey,
        sys::FI_EINVAL | sys::FI_EFAULT | sys::FI_EOVERFLOW => Status::OutOfBounds,
        sys::FI_ETRUNC | sys::FI_EMSGSIZE => Status::RecvTooSmall,
        sys::FI_ENOSYS | sys::FI_EOPNOTSUPP => Status::Unsupported,
        _ => Status::Broken,
    }
}

impl EpShared {
    pub(crate) fn check_sges(
        &self,
        local: &[Sge<'_>],
        need: Access,
    ) -> Result<(SmallVec<[Iov; 4]>, Keep, u64)> {
        let f = &self.ia.feat;
        let total = check_local_sges(local, self.pz.id, need, self.ia.attr.max_sges)?;
        if total > self.ia.attr.max_msg_size {
            return Err(Error::invalid(format!(
                "{total} bytes exceed the {} byte message limit",
                self.ia.attr.max_msg_size
            )));
        }
        let mut iov = SmallVec::new();
        let mut keep = Keep::new();
        for s in local.iter().filter(|s| s.len > 0) {
            let desc = if f.mr_local {
                let o = s
                    .lmr
                    .as_any()
                    .downcast_ref::<OfiLmr>()
                    .ok_or_else(|| Error::invalid("LMR of another provider"))?;
                o.inner.desc
            } else {
                0
            };
            // Read from the LMR once and checked against the region itself:
            // the provider moves these bytes through the raw address.
            let (region, off) = rmr_api::provider::seg_place(s)?;
            iov.push(Iov {
                addr: region.as_ptr() as usize + off as usize,
                len: s.len as usize,
                desc,
            });
            if !keep.iter().any(|r| Arc::ptr_eq(r, region)) {
                keep.push(region.clone());
            }
        }
        Ok((iov, keep, total))
    }

    pub(crate) fn remote(&self, ctx: &RmrContext, off: u64, len: u64) -> Result<Remote> {
        if off.checked_add(len).is_none_or(|e| e > ctx.len) {
            return Err(Error::OutOfBounds { offset: off, len, limit: ctx.len });
        }
        let addr = if self.ia.feat.virt_addr { ctx.addr + off } else { off };
        Ok(Remote { addr, len, key: ctx.key() })
    }

    /// Waits until no read or atomic of this endpoint is in flight (a
    /// BARRIER_FENCE on a provider without FI_FENCE).
    fn software_fence(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.tx.lock().unwrap_or_else(|e| e.into_inner()).reads > 0 {
            if Instant::now() > deadline {
                return Err(Error::Timeout);
            }
            if !self.req.progress(Duration::from_millis(1)) {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// The common post path: assigns the sequence number, decides whether
    /// the provider reports a completion, calls `post` with (token, flags,
    /// the message's header segment, its remote CQ data) and records the
    /// operation, all under the transmit lock so that wire order and
    /// record order agree. A held write (see [`crate::eager`]) rides in a
    /// message (`send`) where it fits, else is posted first. A full queue
    /// is progressed and retried before it becomes [`Error::QueueFull`].
    pub(crate) fn post_tx(
        &self,
        mut meta: TxMeta,
        base_flags: u64,
        send: Option<SendPart<'_>>,
        post: &mut PostFn<'_>,
        call: &str,
    ) -> Result<()> {
        let f = &self.ia.feat;
        for attempt in 0..3 {
            {
                let g = self.fid.read().unwrap_or_else(|e| e.into_inner());
                let Some(ep) = g.as_ref() else { return Err(self.not_connected()) };
                if self.state() != rmr_api::EpState::Connected && meta.kind == TxKind::User {
                    return Err(self.not_connected());
                }
                let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
                let rides = tx.holding
                    && send.as_ref().is_some_and(|sp| {
                        tx.q.back()
                            .is_some_and(|h| h.held.is_some() && h.hlen + sp.own.len() <= HDR_MAX)
                    });
                if tx.holding && !rides {
                    let ret = self.post_held(ep, &mut tx, crate::cork::By::Post);
                    if ret == EAGAIN {
                        drop(tx);
                        drop(g);
                        self.req.progress(Duration::from_millis(u64::from(attempt > 0)));
                        continue;
                    }
                    if ret != 0 {
                        return Err(fi_error("fi_writemsg", ret));
                    }
                }
                // After the rides it overlaps, checked under the lock it
                // is posted under (another thread's message may have just
                // taken a held write along).
                if let Some(t) = meta.target.filter(|t| crate::order::overlapping(&tx, t)) {
                    drop(tx);
                    drop(g);
                    self.confirm(&t)?;
                    continue;
                }
                if tx.q.len() < f.tx_size {
                    let seq = tx.next_seq;
                    meta.seq = seq;
                    let must = meta.user_signal || meta.read_like || meta.kind != TxKind::User;
                    let (signal, completion) = tx.signal(must, meta.read_like, f);
                    meta.prov_signal = signal;
                    let mut flags = base_flags | completion;
                    // The message's header: the held write's (with this
                    // message's entries after it), its own, or none.
                    let (mut pre, mut data, mut rode, mut acked) = (None, 0, None, None);
                    // Whether `meta.hdr` is a buffer taken in this try.
                    let mut fresh = false;
                    if let Some(sp) = &send {
                        if f.eager {
                            let base = if rides { tx.q.back().map_or(0, |h| h.hlen) } else { 0 };
                            // This message's entries: its own (a riding
                            // write numbered with this message's sequence
                            // number), then the acknowledgement of the
                            // peer's riding writes, if due and room is left.
                            let mut add = [0u8; HDR_MAX];
                            let mut n_add = sp.own.len();
                            add[..n_add].copy_from_slice(sp.own);
                            if let Some(at) = sp.patch {
                                eager::set_write_id(&mut add, at, seq);
                            }
                            if let Some(p) = self.ack_due() {
                                if base + n_add + 8 <= HDR_MAX {
                                    eager::put_ack(&mut add, n_add, p);
                                    n_add += 8;
                                    acked = Some(p);
                                }
                            }
                            let (addr, wire) = if rides {
                                let h = tx.q.back_mut().expect("a held record");
                                let b = h.hdr.as_mut().expect("a held write's header");
                                let wire = fill(b, base, &add[..n_add], sp.n);
                                rode = Some((base, h.held));
                                h.hlen = base + n_add;
                                (b.as_ptr() as usize, wire)
                            } else if n_add > 0 {
                                let mut b = tx.take_hdr();
                                let wire = fill(&mut b, 0, &add[..n_add], sp.n);
                                let addr = b.as_ptr() as usize;
                                meta.hdr = Some(b);
                                meta.hlen = n_add;
                                fresh = true;
                                (addr, wire)
                            } else {
                                // Nothing rides: a large message pads with zeros.
                                let wire = if sp.n > HDR_MAX as u64 { HDR_MAX } else { 0 };
                                (eager::PAD.as_ptr() as usize, wire)
                            };
                            pre = (wire > 0).then_some(Iov { addr, len: wire, desc: 0 });
                            data = eager::cq_data(sp.kind, wire, sp.imm);
                            // A plain message with no header carries no data.
                            if data != 0 {
                                flags |= sys::FI_REMOTE_CQ_DATA as u64;
                            }
                        } else if sp.plain != 0 {
                            data = sp.plain;
                            flags |= sys::FI_REMOTE_CQ_DATA as u64;
                        }
                    }
                    rmr_api::stages::stamp(rmr_api::stages::Stage::TxWrite);
                    let release = match tx.cork.as_mut() {
                        Some(c) => c.before_post(meta.wire, meta.corkable, &self.me),
                        None => false,
                    };
                    let ret = post(
                        ep,
                        token(self.tx_idx.load(Ordering::Relaxed), false, seq),
                        flags,
                        pre,
                        data,
                    );
                    if let Some(c) = tx.cork.as_mut() {
                        c.after_post(release, ret == 0);
                    }
                    rmr_api::stages::stamp(rmr_api::stages::Stage::TxDone);
                    if let Some((at, held)) = rode {
                        let h = tx.q.back_mut().expect("a held record");
                        if ret == 0 {
                            // The held write left in this message.
                            h.held = None;
                            let id = h.seq;
                            tx.holding = false;
                            if let Some(c) = tx.cork.as_mut() {
                                c.unhold(None);
                            }
                            if let Some(r) = held {
                                crate::order::rode(&mut tx, r, id);
                            }
                        } else {
                            h.hlen = at;
                        }
                    }
                    if ret == 0 {
                        if let Some(r) = send.as_ref().and_then(|sp| sp.ride) {
                            crate::order::rode(&mut tx, r, seq);
                        }
                        if let Some(p) = acked {
                            self.ack_sent(p);
                        }
                    }
                    if ret == 0 {
                        tx.next_seq += 1;
                        tx.blind = if meta.prov_signal { 0 } else { tx.blind + 1 };
                        if meta.read_like {
                            tx.reads += 1;
                        }
                        tx.q.push_back(meta);
                        return Ok(());
                    }
                    // A buffer taken for this try goes back (one the
                    // caller gave, which `post` points into, stays).
                    if let Some(b) = meta.hdr.take_if(|_| fresh) {
                        tx.give_hdr(b);
                    }
                    if ret != EAGAIN {
                        return Err(fi_error(call, ret));
                    }
                }
            }
            if attempt == 0 {
                self.req.progress(Duration::ZERO);
            } else {
                self.req.progress(Duration::from_millis(1));
            }
        }
        Err(Error::QueueFull)
    }

    pub(crate) fn user_meta(
        &self,
        cookie: u64,
        op: DtoOp,
        flags: DtoFlags,
        bytes: u64,
        keep: Keep,
    ) -> TxMeta {
        TxMeta {
            seq: 0,
            cookie,
            op,
            user_signal: !flags.contains(DtoFlags::SUPPRESS),
            prov_signal: false,
            read_like: matches!(op, DtoOp::RdmaRead | DtoOp::FetchAdd | DtoOp::CmpSwap),
            bytes,
            kind: TxKind::User,
            keep,
            result: None,
            operand: None,
            corkable: false,
            wire: match op {
                DtoOp::RdmaRead => 0,
                DtoOp::FetchAdd => 8,
                DtoOp::CmpSwap => 16,
                _ => bytes,
            },
            hdr: None,
            hlen: 0,
            held: None,
            target: None,
        }
    }

    pub(crate) fn fence_flags(&self, flags: DtoFlags) -> Result<u64> {
        if !flags.contains(DtoFlags::BARRIER_FENCE) {
            return Ok(0);
        }
        if self.ia.feat.fence {
            Ok(sys::FI_FENCE as u64)
        } else {
            self.software_fence()?;
            Ok(0)
        }
    }

    pub(crate) fn post_send(&self, local: &[Sge<'_>], cookie: u64, flags: DtoFlags) -> Result<()> {
        let (iov, keep, total) = self.check_sges(local, Access::empty())?;
        let base = self.fence_flags(flags)?;
        let solicited = flags.contains(DtoFlags::SOLICITED) && self.ia.feat.cq_data >= 8;
        let kind = if solicited { KIND_SOLICITED } else { 0 };
        let part = SendPart {
            kind,
            imm: 0,
            n: total,
            own: &[],
            plain: kind << KIND_SHIFT,
            patch: None,
            ride: None,
        };
        let meta = self.user_meta(cookie, DtoOp::Send, flags, total, keep);
        self.post_tx(
            meta,
            base,
            Some(part),
            // SAFETY: `keep` in the record holds every region of `iov`, and
            // the record or a static the header, until completion or flush.
            &mut |ep, tok, fl, pre, data| unsafe { msg::send(ep, &with(pre, &iov), tok, data, fl) },
            "fi_sendmsg",
        )
    }

    pub(crate) fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion::new(self.id, Cookie(cookie), op, status, bytes)
    }

    /// Completes everything still recorded with `Flushed` (the endpoint ended).
    pub(crate) fn flush(&self) {
        let txq = std::mem::take(&mut self.tx.lock().unwrap_or_else(|e| e.into_inner()).q);
        let rxq = std::mem::take(&mut self.rx.lock().unwrap_or_else(|e| e.into_inner()).q);
        for m in txq.into_iter().filter(|m| m.kind == TxKind::User) {
            self.req.push(Event::Dto(self.dto(m.cookie, m.op, Status::Flushed, 0)));
        }
        for m in rxq {
            self.rcv.push(Event::Dto(self.dto(m.cookie, DtoOp::Recv, Status::Flushed, 0)));
        }
    }

    fn tx_complete(&self, seq: u64, c: &Cqe) -> Option<Event> {
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        let pos = tx.q.iter().position(|m| m.seq & SEQ_MASK == seq)?;
        let mut m = tx.q.remove(pos)?;
        if m.read_like {
            tx.reads = tx.reads.saturating_sub(1);
        }
        if let Some(h) = m.hdr.take() {
            tx.give_hdr(h);
        }
        if c.err == 0 {
            // Sends and writes complete in order: earlier suppressed ones are done.
            tx.retire_through(m.seq);
        }
        drop(tx);
        if m.kind != TxKind::User {
            let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            match m.kind {
                TxKind::Bye => c.bye_done = true,
                TxKind::Fault => c.fault_done = true,
                TxKind::Probe => c.probes += 1,
                TxKind::User => {}
            }
            return None;
        }
        if c.err == 0 {
            if !m.user_signal {
                return None;
            }
            let mut d = self.dto(m.cookie, m.op, Status::Success, m.bytes);
            if let Some((r, off)) = &m.result {
                let mut b = [0u8; 8];
                if r.read(*off, &mut b).is_ok() {
                    d.imm = Some(u64::from_ne_bytes(b));
                }
            }
            return Some(Event::Dto(d));
        }
        let status = tx_status(c.err);
        tracing::debug!(
            target: "rmr::ofi",
            op = ?m.op,
            cookie = m.cookie,
            error = %crate::ffi::strerror(c.err),
            prov_errno = c.prov_errno,
            "DTO failed"
        );
        Some(Event::Dto(self.dto(m.cookie, m.op, status, 0)))
    }
}

/// A message's segments: its header's, then the payload's.
pub(crate) fn with(pre: Option<Iov>, iov: &[Iov]) -> SmallVec<[Iov; 5]> {
    pre.into_iter().chain(iov.iter().copied()).collect()
}

/// Copies the bytes of `local` (checked by `check_sges`) into `dst`, as
/// they are now (a write that rides in a message is read at its post).
pub(crate) fn copy_from(local: &[Sge<'_>], dst: &mut [u8]) -> Result<()> {
    let mut at = 0;
    for s in local.iter().filter(|s| s.len > 0) {
        let (region, off) = rmr_api::provider::seg_place(s)?;
        let n = s.len as usize;
        region.read(off, &mut dst[at..at + n])?;
        at += n;
    }
    Ok(())
}

/// An endpoint to break, and why.
pub(crate) type Breaks = (Arc<EpShared>, String);

/// Translates one CQ entry: the event to queue (if any) and an endpoint to
/// break (with why), e.g. after a receive that was too small.
pub(crate) fn on_cqe(c: &Cqe, ep: Arc<EpShared>) -> Option<(Option<Event>, Option<Breaks>)> {
    let seq = c.token & SEQ_MASK;
    if c.token & RX_BIT != 0 {
        let (ev, why) = ep.rx_complete(seq, c);
        Some((ev, why.map(|w| (ep, w))))
    } else {
        Some((ep.tx_complete(seq, c), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eager::KIND_IMM;

    #[test]
    fn tokens_carry_endpoint_direction_and_sequence() {
        let t = token(0x00ab_cdef, true, 42);
        assert_eq!(t >> 40, 0x00ab_cdef);
        assert_ne!(t & RX_BIT, 0);
        assert_eq!(t & SEQ_MASK, 42);
        let t = token(1, false, SEQ_MASK + 5); // sequence numbers wrap inside the mask
        assert_eq!((t >> 40, t & RX_BIT, t & SEQ_MASK), (1, 0, 4));
        assert_ne!(token(1, false, 0), 0, "a token is never the null context");
    }

    #[test]
    fn remote_cq_data_layout() {
        let data = (KIND_IMM << KIND_SHIFT) | ((1000 & LEN_MASK) << 32) | 0x00C0_FFEE;
        assert_eq!(data >> KIND_SHIFT, KIND_IMM);
        assert_eq!((data >> 32) & LEN_MASK, 1000);
        assert_eq!(data & 0xffff_ffff, 0x00C0_FFEE);
        assert_eq!((KIND_SOLICITED << KIND_SHIFT) >> KIND_SHIFT, KIND_SOLICITED);
    }

    #[test]
    fn libfabric_errors_map_to_statuses() {
        assert_eq!(tx_status(sys::FI_ECANCELED as i32), Status::Flushed);
        assert_eq!(tx_status(sys::FI_EACCES as i32), Status::RemoteAccess);
        assert_eq!(tx_status(sys::FI_EKEYREJECTED as i32), Status::BadKey);
        assert_eq!(tx_status(sys::FI_ETRUNC as i32), Status::RecvTooSmall);
        assert_eq!(tx_status(sys::FI_EIO as i32), Status::Broken);
    }
}
