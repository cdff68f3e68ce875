//! The bridged endpoint: one real connection to a bridge, spliced there to
//! the peer's. Every operation is cut into chunks that travel as messages
//! into the bridge's pre-registered ring under credit-based flow control;
//! the bridge forwards each chunk as it arrives (an RDMA write straight
//! into the peer's memory, a send into the peer's ring, an RDMA read whose
//! data comes back as messages) and acknowledges an operation only once
//! it has landed on the far side.
//!
//! Completions are released in posting order; a delivered send is copied
//! from this end's ring into the receive the user posted (sends that
//! arrive before a receive wait in the ring, holding data credits, so a
//! sender is slowed rather than anything dropped).

use super::evd::BridgeEvd;
use super::ia::{BridgeIa, BridgeLmr, BridgePz, ClientConfig};
use crate::chunk::{ClientOp, ClientOps, chunks};
use crate::credit::{Credits, Returns};
use crate::handshake::{BridgeHello, ClientHello, Reply};
use crate::ring::Ring;
use crate::wire::{HDR, Header, Kind, flags};
use rmr_api::provider::clock::now_ns;
use rmr_api::provider::{SoftEvd, check_local_sges};
use rmr_api::{
    Access, ConnRequest, DtoCompletion, DtoFlags, DtoOp, Ep, EpAttr, EpEvds, EpId, EpState, Error,
    Evd, Event, Lmr, MemRegion, Result, RmrContext, Sge, Status,
};
use rmr_api::{Cookie, RemoteAddr};
use smallvec::SmallVec;
use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

mod api;
pub use api::BridgedEp;

const RING_BIT: u64 = 1 << 62;
const HDR_BIT: u64 = 1 << 61;

/// Local segments: (real LMR, offset in it, length).
type Segs = SmallVec<[(Arc<dyn Lmr>, u64, u64); 2]>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Send,
    Write,
    Read,
}

impl OpKind {
    fn op(self) -> DtoOp {
        match self {
            OpKind::Send => DtoOp::Send,
            OpKind::Write => DtoOp::RdmaWrite,
            OpKind::Read => DtoOp::RdmaRead,
        }
    }
}

struct Tx {
    hdr: Header,
    payload: Segs,
}

struct UserRecv {
    cookie: u64,
    segs: Segs,
    total: u64,
}

struct St {
    conn: EpState,
    chunk: u64,
    credits: Credits,
    ops: ClientOps<OpKind>,
    txq: VecDeque<Tx>,
    free_hdr: Vec<u32>,
    /// Header slots posted and not yet known complete, in posting order.
    hdr_inflight: VecDeque<u32>,
    /// Posts since the last signalled one.
    unsignalled: u32,
    recvs: VecDeque<UserRecv>,
    held: VecDeque<(usize, Header)>,
    cur: Option<(UserRecv, Status)>,
    reads: BTreeMap<u64, Segs>,
    echo: bool,
    ended: bool,
    ring_posted: bool,
    peer: String,
    /// Messages sent / received (diagnostics).
    sent: u64,
    rcvd: u64,
}

/// Every this many messages to the bridge one asks for a completion (and
/// so for a transport acknowledgement); it frees the header slots of every
/// message posted before it. A message per request would make the bridge
/// answer each with an acknowledgement of its own — a wake-up at both ends.
const SIGNAL_EVERY: u32 = 16;
/// ... and always once fewer header slots than this are free.
const LOW_SLOTS: usize = 8;

impl St {
    /// A header slot for a message, and the flags to post it with.
    fn take_slot(&mut self) -> Option<(u32, DtoFlags)> {
        let slot = self.free_hdr.pop()?;
        let signal = self.unsignalled + 1 >= SIGNAL_EVERY || self.free_hdr.len() < LOW_SLOTS;
        self.unsignalled = if signal { 0 } else { self.unsignalled + 1 };
        self.hdr_inflight.push_back(slot);
        Some((slot, if signal { DtoFlags::empty() } else { DtoFlags::SUPPRESS }))
    }

    /// The message in `slot` could not be posted after all.
    fn untake_slot(&mut self, slot: u32) {
        if self.hdr_inflight.back() == Some(&slot) {
            self.hdr_inflight.pop_back();
        }
        self.free_hdr.push(slot);
        // It may have been the signalled one: the next is.
        self.unsignalled = SIGNAL_EVERY;
    }

    /// The message in `slot` completed: it and every one posted before it are done.
    fn slots_done(&mut self, slot: u32) {
        if !self.hdr_inflight.contains(&slot) {
            return;
        }
        while let Some(s) = self.hdr_inflight.pop_front() {
            self.free_hdr.push(s);
            if s == slot {
                break;
            }
        }
    }
}

const TO_REQ: u8 = 0;
const TO_RECV: u8 = 1;
const TO_CONN: u8 = 2;
type Out = Vec<(u8, Event)>;

/// State shared by the user's handle and the EVDs that harvest it.
pub(crate) struct Core {
    id: EpId,
    cfg: ClientConfig,
    pz_id: u64,
    max_sges: usize,
    inner: Arc<dyn Ep>,
    inner_evd: Arc<dyn Evd>,
    user: EpEvds,
    ring: Ring,
    hdrs: Arc<MemRegion>,
    hdr_lmr: Arc<dyn Lmr>,
    bridge: Option<(String, u16)>,
    st: Mutex<St>,
    harvest: Mutex<()>,
    /// Application threads waiting on this EP's EVDs now, and when the last left.
    waiters: AtomicUsize,
    left_at: AtomicU64,
}

/// After the last application waiter left, the progress thread waits this
/// long before it takes over (a waiter that comes straight back, as in a
/// ping-pong, never hands the endpoint to another thread).
const LINGER: Duration = Duration::from_micros(300);

fn segs_of(local: &[Sge<'_>]) -> Result<Segs> {
    let mut out = Segs::new();
    for s in local {
        let l =
            s.lmr.as_any().downcast_ref::<BridgeLmr>().ok_or_else(|| {
                Error::Protection("a bridged EP needs LMRs of its zipper PZ".into())
            })?;
        if s.len > 0 {
            out.push((l.inner.clone(), s.offset, s.len));
        }
    }
    Ok(out)
}

fn slice(local: &Segs, mut off: u64, mut len: u64) -> Segs {
    let mut out = Segs::new();
    for (l, o, n) in local {
        if len == 0 {
            break;
        }
        if off >= *n {
            off -= n;
            continue;
        }
        let take = (*n - off).min(len);
        out.push((l.clone(), o + off, take));
        len -= take;
        off = 0;
    }
    out
}

/// Copies `len` bytes of `src` at `src_off` into `segs` starting at byte `off`.
fn scatter(segs: &Segs, off: u64, src: &MemRegion, src_off: u64, len: u64) {
    let mut src_off = src_off;
    for (l, o, n) in slice(segs, off, len) {
        let dst = l.region().clone();
        let at = l.offset() + o;
        let _ = dst.copy_from(at, src, src_off, n);
        src_off += n;
    }
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, St> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An application thread starts waiting on one of this EP's EVDs.
    pub(crate) fn enter(&self) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
    }

    /// That thread stops waiting.
    pub(crate) fn leave(&self) {
        self.left_at.store(now_ns(), Ordering::Release);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    fn waited(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
            || now_ns().saturating_sub(self.left_at.load(Ordering::Acquire))
                < LINGER.as_nanos() as u64
    }

    /// The endpoint's progress thread: harvests the real endpoint while no
    /// application thread waits (so credits return, queued chunks go out and
    /// deliveries land even when the application is busy elsewhere), and
    /// stands back while one does (it harvests in its own context).
    fn progress_thread(weak: Weak<Core>) {
        loop {
            let Some(c) = weak.upgrade() else { return };
            if c.lock().ended && c.inner_evd.is_empty() {
                return;
            }
            if c.waited() {
                drop(c);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            match c.inner_evd.as_any().downcast_ref::<SoftEvd>() {
                Some(s) => {
                    let seen = s.poke_gen();
                    if s.wait_ready(seen, Duration::ZERO, Duration::from_millis(10)) && !c.waited()
                    {
                        c.poll_with(false);
                    }
                }
                None => {
                    if !c.poll() {
                        drop(c);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }
        }
    }

    pub(crate) fn inner_evd(&self) -> &Arc<dyn Evd> {
        &self.inner_evd
    }

    fn deliver(&self, out: Out) {
        for (to, ev) in out {
            let evd = match to {
                TO_REQ => &self.user.request,
                TO_RECV => &self.user.recv,
                _ => &self.user.conn,
            };
            if let Some(b) = evd.as_any().downcast_ref::<BridgeEvd>() {
                b.push(ev);
            }
        }
    }

    fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion::new(self.id, Cookie(cookie), op, status, bytes)
    }

    fn post_ring(&self, st: &mut St) -> Result<()> {
        if !st.ring_posted {
            for i in 0..self.ring.n {
                self.ring.post(&*self.inner, 0, i, RING_BIT | i as u64)?;
            }
            st.ring_posted = true;
        }
        Ok(())
    }

    fn repost(&self, st: &mut St, i: usize, data: bool) {
        if self.ring.post(&*self.inner, 0, i, RING_BIT | i as u64).is_ok() {
            st.credits.reposted(data);
        }
    }

    /// Sends what the credits allow: queued chunks, then a control message if one is due.
    fn pump(&self, st: &mut St) {
        if st.conn != EpState::Connected {
            return;
        }
        while !st.txq.is_empty() {
            if !st.credits.can_send_data() {
                break;
            }
            let Some((slot, dflags)) = st.take_slot() else { break };
            let front = st.txq.pop_front().expect("nonempty");
            let mut h = front.hdr;
            let ret = st.credits.send_data();
            let (off, echo) = self.stamp(st, &mut h, ret, slot);
            let mut sges: SmallVec<[Sge<'_>; 4]> = SmallVec::new();
            sges.push(Sge::new(&*self.hdr_lmr, off, HDR as u64));
            for (l, o, n) in &front.payload {
                sges.push(Sge::new(&**l, *o, *n));
            }
            let r = self.inner.post_send(&sges, Cookie(HDR_BIT | u64::from(slot)), dflags);
            crate::trace::line(|| {
                format!(
                    "zep {} send {:?} id {} len {} ret {}/{} -> {r:?} data={}",
                    self.inner.id().0,
                    h.kind,
                    h.id,
                    h.len,
                    h.ret_data,
                    h.ret_ctl,
                    st.credits.data()
                )
            });
            match r {
                Ok(()) => st.sent += 1,
                Err(_) => {
                    drop(sges);
                    Self::unstamp(st, true, ret, echo, slot);
                    st.txq.push_front(front);
                    return;
                }
            }
        }
        while st.credits.want_ctl() {
            let Some((slot, dflags)) = st.take_slot() else { break };
            let mut h = Header::new(Kind::Ctl);
            let ret = st.credits.send_ctl();
            let (off, echo) = self.stamp(st, &mut h, ret, slot);
            let sge = [Sge::new(&*self.hdr_lmr, off, HDR as u64)];
            let r = self.inner.post_send(&sge, Cookie(HDR_BIT | u64::from(slot)), dflags);
            crate::trace::line(|| {
                format!(
                    "zep {} send ctl ret {}/{} -> {r:?}",
                    self.inner.id().0,
                    h.ret_data,
                    h.ret_ctl
                )
            });
            if r.is_err() {
                Self::unstamp(st, false, ret, echo, slot);
                return;
            }
            st.sent += 1;
        }
    }

    /// Stamps `h` with the credits it returns (`ret`) and a pending echo
    /// reply, and writes it into header slot `slot`. Returns the slot's
    /// offset and whether the header carries the echo reply.
    fn stamp(&self, st: &mut St, h: &mut Header, ret: Returns, slot: u32) -> (u64, bool) {
        (h.ret_data, h.ret_ctl) = ret;
        let echo = std::mem::take(&mut st.echo);
        if echo {
            h.flags |= flags::ECHO_REPLY;
        }
        let off = u64::from(slot) * HDR as u64;
        let _ = self.hdrs.write(off, &h.encode());
        (off, echo)
    }

    /// Takes back what [`Core::stamp`] and the slot took, after a failed post.
    fn unstamp(st: &mut St, data: bool, ret: Returns, echo: bool, slot: u32) {
        st.credits.undo(data, ret);
        st.echo |= echo;
        st.untake_slot(slot);
    }

    fn match_delivers(&self, st: &mut St, out: &mut Out) {
        while let Some(&(i, h)) = st.held.front() {
            if st.cur.is_none() {
                let Some(r) = st.recvs.pop_front() else { break };
                let status = if h.total > r.total { Status::RecvTooSmall } else { Status::Success };
                st.cur = Some((r, status));
            }
            if let Some((r, Status::Success)) = &st.cur {
                if h.len > 0 {
                    let at = self.ring.at(i) + HDR as u64;
                    scatter(&r.segs, h.offset, &self.ring.region, at, u64::from(h.len));
                }
            }
            st.held.pop_front();
            self.repost(st, i, true);
            if h.has(flags::LAST) {
                let (r, status) = st.cur.take().expect("current receive");
                let mut c = self.dto(r.cookie, DtoOp::Recv, status, h.total);
                c.solicited = h.has(flags::SOLICITED);
                out.push((TO_RECV, Event::Dto(c)));
            }
        }
    }

    fn on_message(&self, st: &mut St, i: usize, out: &mut Out) {
        st.rcvd += 1;
        let Some(h) = self.ring.header(i) else {
            self.repost(st, i, false);
            return;
        };
        st.credits.on_returns((h.ret_data, h.ret_ctl));
        crate::trace::line(|| {
            format!(
                "zep {} msg slot {i} {:?} id {} len {} flags {:#x} ack {} ret {}/{} -> data={} ctl={} recvs={} held={}",
                self.inner.id().0,
                h.kind,
                h.id,
                h.len,
                h.flags,
                h.ack,
                h.ret_data,
                h.ret_ctl,
                st.credits.data(),
                st.credits.ctl(),
                st.recvs.len(),
                st.held.len()
            )
        });
        if h.has(flags::ERR) {
            st.ops.fail(h.err_id, Status::from_code(h.status).unwrap_or(Status::RemoteAccess));
        }
        match h.kind {
            Kind::Deliver => {
                st.held.push_back((i, h));
                self.match_delivers(st, out);
            }
            Kind::ReadData => {
                if let Some(d) = st.reads.get(&h.id) {
                    let at = self.ring.at(i) + HDR as u64;
                    scatter(d, h.total, &self.ring.region, at, u64::from(h.len));
                }
                self.repost(st, i, true);
            }
            k => {
                if h.has(flags::ECHO) {
                    st.echo = true;
                    st.credits.set_urgent();
                }
                self.repost(st, i, k.is_data());
            }
        }
        let mut done: Vec<ClientOp<OpKind>> = Vec::new();
        st.ops.ack(h.ack, &mut done);
        for o in done {
            st.reads.remove(&o.id);
            if o.signalled || !o.status.is_ok() {
                out.push((TO_REQ, Event::Dto(self.dto(o.cookie, o.kind.op(), o.status, o.bytes))));
            }
        }
    }

    fn end(&self, st: &mut St, disconnected: bool, reason: String, out: &mut Out) {
        if st.ended {
            return;
        }
        st.ended = true;
        st.conn = if disconnected { EpState::Disconnected } else { EpState::Broken };
        let status = if disconnected { Status::Flushed } else { Status::Broken };
        let mut done = Vec::new();
        st.ops.fail_all(status, &mut done);
        for o in done {
            out.push((TO_REQ, Event::Dto(self.dto(o.cookie, o.kind.op(), o.status, o.bytes))));
        }
        st.txq.clear();
        st.reads.clear();
        st.held.clear();
        let cur = st.cur.take().map(|(r, _)| r);
        for r in cur.into_iter().chain(st.recvs.drain(..)) {
            out.push((TO_RECV, Event::Dto(self.dto(r.cookie, DtoOp::Recv, Status::Flushed, 0))));
        }
        out.push((
            TO_CONN,
            if disconnected {
                Event::Disconnected { ep: self.id }
            } else {
                Event::Broken { ep: self.id, reason }
            },
        ));
    }

    fn handle(&self, st: &mut St, ev: Event, out: &mut Out) {
        if !matches!(&ev, Event::Dto(c) if c.status.is_ok()) {
            crate::trace::line(|| {
                format!("zep {} event {}", self.inner.id().0, crate::trace::ev(&ev))
            });
        }
        match ev {
            Event::Dto(c) if c.cookie.0 & HDR_BIT != 0 => {
                st.slots_done((c.cookie.0 & 0xffff_ffff) as u32);
            }
            Event::Dto(c) if c.cookie.0 & RING_BIT != 0 && c.status.is_ok() => {
                self.on_message(st, (c.cookie.0 & 0xffff_ffff) as usize, out);
            }
            Event::Disconnected { .. } => self.end(st, true, String::new(), out),
            Event::Broken { reason, .. } => {
                self.end(st, false, format!("connection to the bridge broke: {reason}"), out);
            }
            _ => {}
        }
    }

    /// Harvests the real endpoint's events once; true when anything happened.
    pub(crate) fn poll(&self) -> bool {
        self.poll_with(true)
    }

    /// [`Core::poll`]; with `drive` false it only takes what the real EVD
    /// already holds (for a caller that drives the endpoint by other means
    /// — a waiter blocking in the EVD's drivers — and would otherwise make
    /// a read that finds nothing each time it looks).
    pub(crate) fn poll_with(&self, drive: bool) -> bool {
        let _g = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
        let soft = if drive { None } else { self.inner_evd.as_any().downcast_ref::<SoftEvd>() };
        let mut batch: SmallVec<[Event; 16]> = SmallVec::new();
        while batch.len() < 64 {
            let ev = match soft {
                Some(s) => s.try_pop(),
                None => self.inner_evd.dequeue(),
            };
            match ev {
                Some(ev) => batch.push(ev),
                None => break,
            }
        }
        if batch.is_empty() {
            return false;
        }
        let mut out = Out::new();
        let mut st = self.lock();
        for ev in batch {
            self.handle(&mut st, ev, &mut out);
        }
        self.pump(&mut st);
        drop(st);
        self.deliver(out);
        true
    }

    fn check_up(st: &St) -> Result<()> {
        match st.conn {
            EpState::Connected => Ok(()),
            EpState::Broken => Err(Error::Broken("bridged connection lost".into())),
            _ => Err(Error::NotConnected),
        }
    }

    fn post(
        &self,
        kind: OpKind,
        local: &[Sge<'_>],
        remote: Option<(&RmrContext, u64)>,
        cookie: u64,
        fl: DtoFlags,
    ) -> Result<()> {
        let need = if kind == OpKind::Read { Access::LOCAL_WRITE } else { Access::empty() };
        let total = check_local_sges(local, self.pz_id, need, self.max_sges)?;
        let segs = segs_of(local)?;
        if let Some((ctx, off)) = remote {
            if off.checked_add(total).is_none_or(|e| e > ctx.len) {
                return Err(Error::OutOfBounds { offset: off, len: total, limit: ctx.len });
            }
        }
        let mut st = self.lock();
        Self::check_up(&st)?;
        if !st.ops.has_room() {
            return Err(Error::QueueFull);
        }
        let signalled = !fl.contains(DtoFlags::SUPPRESS);
        let id = st.ops.push(cookie, kind, signalled, total);
        crate::trace::line(|| {
            format!("zep {} post {kind:?} id {id} {total}B txq={}", self.inner.id().0, st.txq.len())
        });
        let mut base = 0;
        if signalled {
            base |= flags::SIGNALLED;
        }
        if fl.contains(DtoFlags::SOLICITED) {
            base |= flags::SOLICITED;
        }
        let pieces: SmallVec<[(u64, u64); 16]> = chunks(total, st.chunk).collect();
        let n = pieces.len();
        for (k, (off, len)) in pieces.into_iter().enumerate() {
            let mut h = Header::new(match kind {
                OpKind::Send => Kind::Send,
                OpKind::Write => Kind::Write,
                OpKind::Read => Kind::ReadReq,
            });
            h.id = id;
            h.len = len as u32;
            h.flags = base | if k + 1 == n { flags::LAST } else { 0 };
            match remote {
                Some((ctx, roff)) => {
                    h.ctx = Some(*ctx);
                    h.offset = roff + off;
                    h.total = if kind == OpKind::Read { off } else { total };
                }
                None => {
                    h.offset = off;
                    h.total = total;
                }
            }
            let payload = if kind == OpKind::Read { Segs::new() } else { slice(&segs, off, len) };
            st.txq.push_back(Tx { hdr: h, payload });
        }
        if kind == OpKind::Read {
            st.reads.insert(id, segs);
        }
        self.pump(&mut st);
        Ok(())
    }
}
