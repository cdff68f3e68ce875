//! Endpoints: an rdma_cm id with an RC QP, its send/receive bookkeeping,
//! and the connection state machine.

use crate::cm_event::{self, Closed, CmEvent, ConnectStep};
use crate::completion::{Wc, breaks_qp, describe, map_status, recv_info};
use crate::evd::{Breaks, VerbsEvd};
use crate::ia::{IaCore, Route};
use crate::lmr::VerbsLmr;
use crate::private_data::{self, Ctrl, Kind};
use crate::pz::PzCore;
use crate::qp_state::{QpEvent, QpState, apply, conn_params};
use crate::queue::{RecvTracker, SendTracker};
use crate::sys::cm::{CmId, ConnArgs};
use crate::sys::device::{AsyncEvent, Ctx};
use crate::sys::mr::Mr;
use crate::sys::qp::QpRef;
use crate::wr::{self, LocalSeg, RemoteTarget, Segs, WrKind, WrQueue, decode_wr_id, encode_wr_id};
use rmr_api::provider::check_local_sges;
use rmr_api::{
    Access, DtoCompletion, DtoFlags, DtoOp, Ep, EpAttr, EpId, EpState, Error, Event, MemRegion,
    Result, RmrContext, Sge,
};
use rmr_api::{CompareSwap, Cookie, RemoteAddr};
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

mod api;
pub use api::VerbsEp;

/// What a peer writes into our control word before an orderly disconnect.
const GOODBYE: u64 = 0x6579_6264_6f6f_6721;
/// How long a disconnect waits for the goodbye to be acknowledged.
const GOODBYE_WAIT: Duration = Duration::from_secs(1);

/// (device context, QP number) -> endpoint, for completions and async events.
type QpTable = HashMap<(usize, u32), Weak<EpCore>>;
static QPS: RwLock<Option<QpTable>> = RwLock::new(None);

fn qps_insert(ctx: Ctx, qpn: u32, ep: Weak<EpCore>) {
    let mut m = QPS.write().unwrap_or_else(|e| e.into_inner());
    m.get_or_insert_with(HashMap::new).insert((ctx.raw() as usize, qpn), ep);
}

fn qps_remove(ctx: Ctx, qpn: u32) {
    let mut m = QPS.write().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = m.as_mut() {
        m.remove(&(ctx.raw() as usize, qpn));
    }
}

fn qps_lookup(ctx: Ctx, qpn: u32) -> Option<Arc<EpCore>> {
    let m = QPS.read().unwrap_or_else(|e| e.into_inner());
    m.as_ref()?.get(&(ctx.raw() as usize, qpn))?.upgrade()
}

fn qps_all(ctx: Ctx) -> Vec<Arc<EpCore>> {
    let m = QPS.read().unwrap_or_else(|e| e.into_inner());
    let Some(m) = m.as_ref() else { return Vec::new() };
    m.iter()
        .filter(|((c, _), _)| *c == ctx.raw() as usize)
        .filter_map(|(_, w)| w.upgrade())
        .collect()
}

/// Handles a device async event (from the IA's event thread).
pub(crate) fn on_async(ctx: Ctx, ev: AsyncEvent) {
    match ev {
        AsyncEvent::QpError { qp_num, what } => {
            if let Some(ep) = qps_lookup(ctx, qp_num) {
                ep.fail(format!("QP error: {what}"));
            }
        }
        AsyncEvent::PortDown { port: p } => {
            // Any IA's thread may read the event: every EP on that port breaks.
            for ep in qps_all(ctx).into_iter().filter(|e| e.ia.port == p) {
                ep.fail(format!("port {p} went down"));
            }
        }
        AsyncEvent::DeviceFatal => {
            for ep in qps_all(ctx) {
                ep.fail("RDMA device failed (IBV_EVENT_DEVICE_FATAL)".into());
            }
        }
        AsyncEvent::CqOverrun => {
            for ep in qps_all(ctx) {
                ep.fail("completion queue overrun: completions were lost".into());
            }
        }
        _ => {}
    }
}

/// Turns one work completion into events (called by an EVD holding its lock).
pub(crate) fn dispatch_wc(ctx: Ctx, wc: &Wc, q: &mut VecDeque<Event>, breaks: &mut Breaks) {
    let Some(ep) = qps_lookup(ctx, wc.qp_num) else { return };
    let (queue, seq) = decode_wr_id(wc.wr_id);
    match queue {
        WrQueue::Recv => {
            let cookie = ep.rx.lock().unwrap_or_else(|e| e.into_inner()).t.complete(seq);
            if let Some(cookie) = cookie {
                let r = recv_info(wc);
                q.push_back(Event::Dto(DtoCompletion {
                    ep: ep.id,
                    cookie: Cookie(cookie),
                    op: r.op,
                    status: r.status,
                    bytes: r.bytes,
                    imm: r.imm,
                    solicited: r.solicited,
                    rail: None,
                }));
                rmr_api::provider::trace_event(q.back().expect("just queued"));
            }
        }
        WrQueue::Send | WrQueue::Internal => {
            let done = {
                let mut tx = ep.tx.lock().unwrap_or_else(|e| e.into_inner());
                let op = tx.t.op_of(seq).unwrap_or(DtoOp::RdmaWrite);
                tx.t.complete(seq, map_status(wc.status, op))
            };
            for d in done {
                let imm = match &d.extra {
                    Extra::Goodbye => {
                        ep.goodbye_acked.store(true, Ordering::Release);
                        continue;
                    }
                    Extra::Atomic(region, off) if d.status.is_ok() => {
                        let mut b = [0u8; 8];
                        region.read(*off, &mut b).ok().map(|_| u64::from_ne_bytes(b))
                    }
                    _ => None,
                };
                if d.report {
                    q.push_back(Event::Dto(DtoCompletion {
                        ep: ep.id,
                        cookie: Cookie(d.cookie),
                        op: d.op,
                        status: d.status,
                        bytes: if d.status.is_ok() { d.bytes } else { 0 },
                        imm,
                        solicited: false,
                        rail: None,
                    }));
                    rmr_api::provider::trace_event(q.back().expect("just queued"));
                }
            }
        }
    }
    if breaks_qp(wc.status) {
        breaks.push((ep, describe(wc.status, wc.vendor_err)));
    }
}

/// What a send WR carries besides its cookie.
pub(crate) enum Extra {
    None,
    /// An atomic's result buffer (region, offset), read for the completion's `imm`.
    Atomic(Arc<MemRegion>, u64),
    /// The goodbye write of a disconnect.
    Goodbye,
}

struct Tx {
    t: SendTracker<Extra>,
    qp: Option<QpRef>,
    max_inline: u32,
}

struct Rx {
    t: RecvTracker,
    qp: Option<QpRef>,
    /// Receives posted before the QP existed, posted when it is created.
    early: Vec<(u64, Segs)>,
}

struct Conn {
    cm: Option<CmId>,
    qp_state: QpState,
    qp_num: Option<u32>,
    peer: Option<SocketAddr>,
    peer_ctrl: Ctrl,
    /// Private data to report with the passive side's Established event.
    pending_pd: Vec<u8>,
    we_closed: bool,
    /// A Disconnected or Broken event was posted.
    end_reported: bool,
    reserved: bool,
}

/// The shared state of an endpoint (EVDs and the event thread hold it weakly).
pub(crate) struct EpCore {
    pub(crate) id: EpId,
    pub(crate) ia: Arc<IaCore>,
    pz: Arc<PzCore>,
    req: Arc<VerbsEvd>,
    recv: Arc<VerbsEvd>,
    conn_evd: Arc<VerbsEvd>,
    state: AtomicU8,
    connecting: AtomicBool,
    goodbye_acked: AtomicBool,
    conn: Mutex<Conn>,
    mail: Mutex<VecDeque<CmEvent>>,
    mail_cv: Condvar,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
    /// Control word: [0..8) written by the peer's goodbye, [8..16) our goodbye source.
    ctrl_mem: Arc<MemRegion>,
    ctrl_mr: Mr,
    sq_depth: u32,
    rq_depth: u32,
    max_sges: usize,
    me: Weak<EpCore>,
}

fn state_to(s: EpState) -> u8 {
    match s {
        EpState::Unconnected => 0,
        EpState::Pending => 1,
        EpState::Connected => 2,
        EpState::Disconnected => 3,
        EpState::Broken => 4,
    }
}

fn state_from(v: u8) -> EpState {
    match v {
        0 => EpState::Unconnected,
        1 => EpState::Pending,
        2 => EpState::Connected,
        3 => EpState::Disconnected,
        _ => EpState::Broken,
    }
}

fn post_errno(call: &str, e: i32) -> Error {
    if e == libc::ENOMEM { Error::QueueFull } else { crate::sys::errno_err(call, e) }
}

impl EpCore {
    fn conn(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn state(&self) -> EpState {
        state_from(self.state.load(Ordering::Acquire))
    }

    fn set_state(&self, s: EpState) {
        self.state.store(state_to(s), Ordering::Release);
    }

    fn my_ctrl(&self) -> Ctrl {
        Ctrl { addr: self.ctrl_mem.addr(), rkey: self.ctrl_mr.rkey() }
    }

    fn params(&self, peer: Option<(u8, u8)>) -> crate::qp_state::ConnParams {
        let l = &self.ia.limits;
        conn_params(
            l.max_qp_rd_atom,
            l.max_qp_init_rd_atom,
            self.ia.cfg.retry_count,
            self.ia.cfg.rnr_retry,
            peer,
        )
    }

    /// Creates the QP on `id` and posts the early receives.
    fn attach_qp(&self, c: &mut Conn, id: &mut CmId) -> Result<()> {
        let (sq, rq) = (i64::from(self.sq_depth), i64::from(self.rq_depth));
        if !c.reserved {
            self.req.reserve(sq)?;
            if let Err(e) = self.recv.reserve(rq) {
                self.req.release(sq);
                return Err(e);
            }
            c.reserved = true;
        }
        let cap = rdma_sys::ibv_qp_cap {
            max_send_wr: self.sq_depth,
            max_recv_wr: self.rq_depth,
            max_send_sge: self.max_sges as u32,
            max_recv_sge: self.max_sges as u32,
            max_inline_data: self.ia.cfg.max_inline,
        };
        let (qp, granted) = match id.create_qp(&self.pz.pd, &self.req.cq, &self.recv.cq, cap) {
            // Some devices refuse inline data with many SGEs: retry without.
            Err(_) if cap.max_inline_data > 0 => id.create_qp(
                &self.pz.pd,
                &self.req.cq,
                &self.recv.cq,
                rdma_sys::ibv_qp_cap { max_inline_data: 0, ..cap },
            )?,
            r => r?,
        };
        qps_insert(self.ia.ctx, qp.qp_num(), self.me.clone());
        c.qp_num = Some(qp.qp_num());
        c.qp_state = apply(QpState::Reset, QpEvent::Created);
        {
            let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            tx.qp = Some(qp);
            tx.max_inline = granted.max_inline_data;
        }
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        rx.qp = Some(qp);
        for (seq, segs) in std::mem::take(&mut rx.early) {
            qp.post_recv(&segs, encode_wr_id(WrQueue::Recv, seq))
                .map_err(|e| post_errno("ibv_post_recv", e))?;
        }
        Ok(())
    }

    /// Forgets the QP and id of a failed connect; the EP may try again.
    fn detach(&self, c: &mut Conn, id: Option<CmId>) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).qp = None;
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).qp = None;
        if let Some(n) = c.qp_num.take() {
            qps_remove(self.ia.ctx, n);
        }
        if let Some(id) = id {
            self.ia.route_remove(id.key());
            drop(id);
        }
        c.qp_state = QpState::Reset;
        if c.reserved {
            self.req.release(i64::from(self.sq_depth));
            self.recv.release(i64::from(self.rq_depth));
            c.reserved = false;
        }
    }

    fn wait_mail(&self, deadline: Instant) -> Result<ConnectStep> {
        let mut m = self.mail.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            while let Some(ev) = m.pop_front() {
                match cm_event::connect_step(&ev) {
                    ConnectStep::Ignore => continue,
                    step => return Ok(step),
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout);
            }
            m = self.mail_cv.wait_timeout(m, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let _span =
            tracing::debug_span!(target: "rmr::verbs", "connect", ep = self.id.0, remote, service)
                .entered();
        let ip: IpAddr =
            remote.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| {
                Error::invalid(format!("`{remote}` is not an IP address (verbs connects by IP)"))
            })?;
        let hdr = private_data::encode(Kind::Connect, self.my_ctrl(), pd)?;
        let deadline = Instant::now() + timeout;
        let ms = |d: Duration| d.min(self.ia.cfg.resolve_timeout).as_millis().max(1) as i32;
        let mut id;
        {
            let c = self.conn();
            if self.state() != EpState::Unconnected || c.cm.is_some() {
                return Err(Error::invalid("endpoint already connected or connecting"));
            }
            self.set_state(EpState::Pending);
            self.mail.lock().unwrap_or_else(|e| e.into_inner()).clear();
            self.connecting.store(true, Ordering::Release);
            id = match CmId::create(&self.ia.chan) {
                Ok(id) => id,
                Err(e) => {
                    self.connecting.store(false, Ordering::Release);
                    self.set_state(EpState::Unconnected);
                    return Err(e);
                }
            };
            self.ia.route_add(id.key(), Route::Ep(self.me.clone()));
        }
        let dst = SocketAddr::new(ip, service);
        let res = (|| -> Result<(Vec<u8>, Ctrl)> {
            id.resolve_addr(SocketAddr::new(self.ia.ip, 0), dst, ms(timeout))?;
            loop {
                match self.wait_mail(deadline)? {
                    ConnectStep::ResolveRoute => {
                        id.resolve_route(ms(deadline.saturating_duration_since(Instant::now())))?
                    }
                    ConnectStep::Connect => {
                        {
                            let mut c = self.conn();
                            self.attach_qp(&mut c, &mut id)?;
                        }
                        id.connect(&ConnArgs { private_data: &hdr, params: self.params(None) })?;
                    }
                    ConnectStep::Established { user, ctrl } => return Ok((user, ctrl)),
                    other => return Err(cm_event::connect_error(other)),
                }
            }
        })();
        let mut c = self.conn();
        match res {
            Ok((user, ctrl)) => {
                c.peer = id.peer_addr().or(Some(dst));
                c.peer_ctrl = ctrl;
                c.qp_state = apply(c.qp_state, QpEvent::Established);
                c.cm = Some(id);
                self.set_state(EpState::Connected);
                drop(c);
                self.conn_evd.push(Event::Established { ep: self.id, private_data: user.clone() });
                // The flag is cleared under the mail lock: events that came
                // after ESTABLISHED (a quick disconnect) are handled here,
                // later ones by the event thread directly.
                let late: Vec<CmEvent> = {
                    let mut m = self.mail.lock().unwrap_or_else(|e| e.into_inner());
                    self.connecting.store(false, Ordering::Release);
                    m.drain(..).collect()
                };
                for ev in late {
                    self.on_connected_event(ev);
                }
                Ok(user)
            }
            Err(e) => {
                {
                    let _m = self.mail.lock().unwrap_or_else(|e| e.into_inner());
                    self.connecting.store(false, Ordering::Release);
                }
                self.detach(&mut c, Some(id));
                self.set_state(EpState::Unconnected);
                Err(e)
            }
        }
    }

    /// Accepts a request's id onto this endpoint.
    pub(crate) fn accept(
        &self,
        mut id: CmId,
        connector_pd: Vec<u8>,
        peer_ctrl: Ctrl,
        peer_rd: (u8, u8),
        reply: &[u8],
    ) -> Result<()> {
        let _span = tracing::debug_span!(target: "rmr::verbs", "accept", ep = self.id.0).entered();
        let hdr = private_data::encode(Kind::Accept, self.my_ctrl(), reply)?;
        let mut c = self.conn();
        if self.state() != EpState::Unconnected || c.cm.is_some() {
            let _ = id.reject(&[]);
            return Err(Error::invalid("endpoint already connected or connecting"));
        }
        self.ia.route_add(id.key(), Route::Ep(self.me.clone()));
        let res = self.attach_qp(&mut c, &mut id).and_then(|_| {
            id.accept(&ConnArgs { private_data: &hdr, params: self.params(Some(peer_rd)) })
        });
        match res {
            Ok(()) => {
                c.qp_state = apply(c.qp_state, QpEvent::Accepted);
                c.peer = id.peer_addr();
                c.peer_ctrl = peer_ctrl;
                c.pending_pd = connector_pd;
                c.cm = Some(id);
                self.set_state(EpState::Pending);
                Ok(())
            }
            Err(e) => {
                let _ = id.reject(&[]);
                self.detach(&mut c, Some(id));
                Err(e)
            }
        }
    }

    /// An rdma_cm event for this endpoint's id (event thread).
    pub(crate) fn on_cm_event(&self, ev: CmEvent) {
        {
            // The flag is read and cleared under the mail lock, so no event
            // falls between the connecting and the connected handling.
            let mut m = self.mail.lock().unwrap_or_else(|e| e.into_inner());
            if self.connecting.load(Ordering::Acquire) {
                m.push_back(ev);
                self.mail_cv.notify_all();
                return;
            }
        }
        self.on_connected_event(ev);
    }

    fn on_connected_event(&self, ev: CmEvent) {
        let mut c = self.conn();
        match self.state() {
            EpState::Pending => match cm_event::connect_step(&ev) {
                ConnectStep::Established { .. } => {
                    c.qp_state = apply(c.qp_state, QpEvent::Established);
                    self.set_state(EpState::Connected);
                    let pd = std::mem::take(&mut c.pending_pd);
                    drop(c);
                    self.conn_evd.push(Event::Established { ep: self.id, private_data: pd });
                }
                ConnectStep::Ignore if ev.kind != cm_event::CmKind::Disconnected => {}
                other => {
                    drop(c);
                    self.fail(format!("connection failed after accept: {other:?}"));
                }
            },
            EpState::Connected | EpState::Disconnected => {
                let goodbye = self.ctrl_mem.load_u64(0).is_ok_and(|v| v == GOODBYE);
                let has_ctrl = c.peer_ctrl.rkey != 0;
                let Some(closed) = cm_event::connected_event(&ev, c.we_closed, goodbye, has_ctrl)
                else {
                    return;
                };
                if c.end_reported {
                    return;
                }
                c.end_reported = true;
                c.qp_state = apply(c.qp_state, QpEvent::Failed);
                if let Some(cm) = &c.cm {
                    // Completes the disconnect handshake and moves the QP to
                    // ERR, so posted receives flush.
                    let _ = cm.disconnect();
                }
                self.flush_qp();
                let ev = match closed {
                    Closed::Disconnected => {
                        self.set_state(EpState::Disconnected);
                        Event::Disconnected { ep: self.id }
                    }
                    Closed::Broken(reason) => {
                        self.set_state(EpState::Broken);
                        Event::Broken { ep: self.id, reason }
                    }
                };
                drop(c);
                self.conn_evd.push(ev);
            }
            _ => {}
        }
    }

    fn flush_qp(&self) {
        let qp = self.tx.lock().unwrap_or_else(|e| e.into_inner()).qp;
        if let Some(qp) = qp {
            qp.to_error();
        }
    }

    /// The connection broke (failed completion, QP or device error).
    pub(crate) fn fail(&self, reason: String) {
        let mut c = self.conn();
        if c.end_reported || !matches!(self.state(), EpState::Connected | EpState::Pending) {
            return;
        }
        if c.cm.is_none() {
            return;
        }
        c.end_reported = true;
        c.qp_state = apply(c.qp_state, QpEvent::Failed);
        self.set_state(EpState::Broken);
        self.flush_qp();
        if let Some(cm) = &c.cm {
            // Tell the peer (it sees a disconnect without goodbye: Broken).
            let _ = cm.disconnect();
        }
        drop(c);
        self.conn_evd.push(Event::Broken { ep: self.id, reason });
    }

    fn disconnect(&self) -> Result<()> {
        let peer_ctrl = {
            let mut c = self.conn();
            if self.state() != EpState::Connected || c.we_closed {
                return Err(Error::NotConnected);
            }
            c.we_closed = true;
            c.peer_ctrl
        };
        if peer_ctrl.rkey != 0 {
            self.say_goodbye(peer_ctrl);
        }
        let c = self.conn();
        self.set_state(EpState::Disconnected);
        if let Some(cm) = &c.cm {
            cm.disconnect()?;
        }
        Ok(())
    }

    /// RDMA-writes GOODBYE into the peer's control word and waits (bounded)
    /// for the acknowledgement, so that the peer can tell this disconnect
    /// from a crash. Best effort: a full SQ or a slow peer skips it.
    fn say_goodbye(&self, peer: Ctrl) {
        let _ = self.ctrl_mem.store_u64(8, GOODBYE);
        self.goodbye_acked.store(false, Ordering::Release);
        let seg = LocalSeg { addr: self.ctrl_mem.addr() + 8, len: 8, lkey: self.ctrl_mr.lkey() };
        let target = RemoteTarget { addr: peer.addr, rkey: peer.rkey };
        {
            let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            let Some(qp) = tx.qp else { return };
            let Ok(ticket) = tx.t.begin(true) else { return };
            let mut segs = Segs::new();
            segs.push(seg);
            let plan = wr::plan_send(WrKind::Write, segs, Some(target), DtoFlags::empty(), true, 0);
            if qp.post_send(&plan, encode_wr_id(WrQueue::Internal, ticket.seq)).is_err() {
                return;
            }
            tx.t.commit(ticket, 0, DtoOp::RdmaWrite, 8, false, Extra::Goodbye);
        }
        let deadline = Instant::now() + GOODBYE_WAIT;
        while !self.goodbye_acked.load(Ordering::Acquire) && Instant::now() < deadline {
            self.req.progress();
            if self.state() == EpState::Broken {
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn check_posting(&self) -> Result<()> {
        match self.state() {
            EpState::Connected => Ok(()),
            _ => Err(Error::NotConnected),
        }
    }

    fn post_sq(
        &self,
        kind: WrKind,
        local: &[Sge<'_>],
        remote: Option<RemoteTarget>,
        cookie: u64,
        flags: DtoFlags,
        extra: Extra,
    ) -> Result<()> {
        check_local_sges(local, self.pz.id, kind.local_access(), self.max_sges)?;
        self.check_posting()?;
        let segs = wr::local_segs(local, |l| VerbsLmr::lkey_for(l, &self.ia))?;
        let want = !flags.contains(DtoFlags::SUPPRESS);
        // One slot stays free for the goodbye of a disconnect.
        let full = |tx: &Tx| tx.t.len() + 1 >= self.sq_depth as usize;
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        if full(&tx) {
            // Reap completions (they go to the EVD's queue), then look again:
            // nobody may be waiting on the EVD to do it.
            drop(tx);
            self.req.progress();
            tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
            if full(&tx) {
                return Err(Error::QueueFull);
            }
        }
        let Some(qp) = tx.qp else { return Err(Error::NotConnected) };
        let ticket = tx.t.begin(want)?;
        let plan = wr::plan_send(kind, segs, remote, flags, ticket.signalled, tx.max_inline);
        qp.post_send(&plan, encode_wr_id(WrQueue::Send, ticket.seq))
            .map_err(|e| post_errno("ibv_post_send", e))?;
        tx.t.commit(ticket, cookie, kind.op(), plan.bytes, want, extra);
        Ok(())
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: u64) -> Result<()> {
        check_local_sges(local, self.pz.id, Access::LOCAL_WRITE, self.max_sges)?;
        if matches!(self.state(), EpState::Disconnected | EpState::Broken) {
            return Err(Error::NotConnected);
        }
        let segs = wr::local_segs(local, |l| VerbsLmr::lkey_for(l, &self.ia))?;
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        if rx.t.begin().is_err() {
            drop(rx);
            self.recv.progress();
            rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        }
        let seq = rx.t.begin()?;
        match rx.qp {
            Some(qp) => qp
                .post_recv(&segs, encode_wr_id(WrQueue::Recv, seq))
                .map_err(|e| post_errno("ibv_post_recv", e))?,
            None => rx.early.push((seq, segs)),
        }
        rx.t.commit(seq, cookie);
        Ok(())
    }

    fn atomic(
        &self,
        kind: WrKind,
        result: Sge<'_>,
        remote: &RmrContext,
        off: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        if !self.ia.attr.caps.contains(rmr_api::Caps::ATOMICS) {
            return Err(Error::Unsupported("atomics (the device has none)"));
        }
        if result.len != 8 {
            return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
        }
        let t = wr::atomic_target(remote, off)?;
        let extra = Extra::Atomic(result.lmr.region().clone(), result.lmr.offset() + result.offset);
        self.post_sq(kind, &[result], Some(t), cookie, flags, extra)
    }
}
