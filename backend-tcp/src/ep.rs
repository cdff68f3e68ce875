//! The TCP endpoint: connection set-up, the post path, and the shared state
//! its reader ([`crate::rx`]) and sender threads work on.

use crate::ia::IaShared;
use crate::rx::{End, RxState};
use crate::tx::{Pushed, Seg, Segs, Tx};
use crate::wire::{self, F_ACK_NOW, F_ACK_REQ, F_SOLICITED, HDR, Header, Op};
use rmr_api::provider::{Driver, Interest, SoftEvd, WaitOn, check_local_sges};
use rmr_api::{
    Access, DtoCompletion, DtoFlags, DtoOp, Ep, EpAttr, EpEvds, EpId, EpState, Error, Event,
    Result, RmrContext, Sge, Status,
};
use rmr_api::{CompareSwap, Cookie, RemoteAddr};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec, eventfd, poll};
use std::any::Any;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// After an application thread stops driving an EP, its progress thread
/// waits this long before it takes over (a waiter that comes straight back,
/// as in a ping-pong, never hands the socket to another thread).
const LINGER: Duration = Duration::from_micros(200);
/// How often the progress watchdog looks at the endpoints it watches.
const WATCH_EVERY: Duration = Duration::from_millis(2);
/// A waiter that stays this many looks in one wait lets the progress
/// thread sleep until that waiter leaves (the watchdog stops looking).
const DEEP_AFTER: u32 = 16;
/// How long an orderly disconnect waits for the peer's answer.
const DISCONNECT_WAIT: Duration = Duration::from_secs(3);

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    base().elapsed().as_nanos() as u64
}

/// A deadline that the threads driving an EP read on every pass without a
/// lock: nanoseconds after [`base`], 0 for none.
struct Deadline(AtomicU64);

impl Deadline {
    const fn none() -> Deadline {
        Deadline(AtomicU64::new(0))
    }

    fn ns(t: Instant) -> u64 {
        (t.saturating_duration_since(base()).as_nanos() as u64).max(1)
    }

    fn at(&self) -> Option<Instant> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            ns => Some(base() + Duration::from_nanos(ns)),
        }
    }

    fn set(&self, t: Instant) {
        self.0.store(Self::ns(t), Ordering::Release);
    }

    /// Sets it unless one is set already; returns whether it did.
    fn set_if_none(&self, t: Instant) -> bool {
        self.0.compare_exchange(0, Self::ns(t), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Replaces it with `t` if it is still set to `seen` (a value read by
    /// [`Deadline::raw`]); returns whether it did.
    fn replace(&self, seen: u64, t: Instant) -> bool {
        seen != 0
            && self
                .0
                .compare_exchange(seen, Self::ns(t), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Its current value, for [`Deadline::replace`] (0: none).
    fn raw(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    fn clear(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Whether it is set and has passed (no clock read when unset).
    fn passed(&self) -> bool {
        let d = self.0.load(Ordering::Acquire);
        d != 0 && now_ns() >= d
    }

    /// Clears it if it has passed; returns whether this call did.
    fn take_passed(&self) -> bool {
        let d = self.0.load(Ordering::Acquire);
        d != 0
            && now_ns() >= d
            && self.0.compare_exchange(d, 0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// A send-side DTO waiting for its acknowledgement or response.
pub(crate) struct Inflight {
    pub(crate) seq: u64,
    pub(crate) cookie: u64,
    pub(crate) op: DtoOp,
    pub(crate) signalled: bool,
    pub(crate) bytes: u64,
    /// Where a read response or an atomic's old value lands.
    pub(crate) dest: Segs,
}

/// A posted receive.
pub(crate) struct RecvWr {
    pub(crate) cookie: u64,
    pub(crate) segs: Segs,
    pub(crate) total: u64,
}

pub(crate) struct EpShared {
    pub(crate) id: EpId,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) pz_id: u64,
    pub(crate) evds: EpEvds,
    state: AtomicU8,
    pub(crate) tx: OnceLock<Tx>,
    pub(crate) rx: Mutex<Option<RxState>>,
    pub(crate) peer: OnceLock<SocketAddr>,
    pub(crate) inflight: Mutex<VecDeque<Inflight>>,
    pub(crate) recvs: Mutex<VecDeque<RecvWr>>,
    /// Highest peer request sequence number fully handled here.
    pub(crate) rx_done: AtomicU64,
    /// Highest `rx_done` value carried to the peer in any frame.
    pub(crate) acked_sent: AtomicU64,
    /// Highest acknowledgement received from the peer (diagnostics).
    pub(crate) acked_rcvd: AtomicU64,
    /// Frames sent and received (diagnostics).
    pub(crate) frames: [AtomicU64; 2],
    pub(crate) ended: AtomicBool,
    pub(crate) local_disconnect: AtomicBool,
    /// The receive side waits for a posted receive until this deadline.
    stalled: AtomicBool,
    stall_until: Deadline,
    /// An orderly disconnect gives up waiting for the peer at this time.
    disconnect_until: Deadline,
    /// A delayed acknowledgement is due at this time, for the peer's
    /// requests up to `ack_for` (`rx_done` when it was armed).
    ack_due: Deadline,
    ack_for: AtomicU64,
    /// Threads driving this EP now, waits begun, and when the last one left.
    active: AtomicUsize,
    waits: AtomicU64,
    left_at: AtomicU64,
    /// The progress thread sleeps until a leaving waiter kicks it.
    deep: AtomicBool,
    /// The progress thread stands back and the watchdog looks after it.
    watched: AtomicBool,
    /// The progress thread is polling the socket (an arriving waiter kicks it).
    bg_polling: AtomicBool,
    kick_fd: OnceLock<OwnedFd>,
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

fn state_to(s: EpState) -> u8 {
    match s {
        EpState::Unconnected => 0,
        EpState::Pending => 1,
        EpState::Connected => 2,
        EpState::Disconnected => 3,
        EpState::Broken => 4,
    }
}

pub(crate) fn push(evd: &Arc<dyn rmr_api::Evd>, ev: Event) {
    if let Some(s) = evd.as_any().downcast_ref::<SoftEvd>() {
        s.push(ev);
    }
}

/// Socket options every EP stream gets: no Nagle, a bounded time to detect a
/// dead peer or a cut link.
pub(crate) fn tune(stream: &TcpStream, user_timeout: Duration) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let s = socket2::SockRef::from(stream);
    let idle = (user_timeout / 2).max(Duration::from_secs(1));
    let ka = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(Duration::from_secs(1))
        .with_retries(3);
    s.set_tcp_keepalive(&ka)?;
    s.set_tcp_user_timeout(Some(user_timeout))?;
    if let Some(sz) = std::env::var("RMR_TCP_SOCKBUF").ok().and_then(|v| v.parse::<usize>().ok()) {
        s.set_send_buffer_size(sz)?;
        s.set_recv_buffer_size(sz)?;
    }
    Ok(())
}

impl EpShared {
    pub(crate) fn state(&self) -> EpState {
        state_from(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, s: EpState) {
        self.state.store(state_to(s), Ordering::Release);
    }

    fn cas_state(&self, from: EpState, to: EpState) -> bool {
        self.state
            .compare_exchange(state_to(from), state_to(to), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Too many frames wait for the socket: the receive side takes no new
    /// frame until they drain. An honest peer never causes it: its window
    /// bounds its requests (each gets at most one response or ack) and
    /// ours bounds our own, so the queue stays under twice the window; the
    /// bound only stops a peer that sends requests and never reads.
    pub(crate) fn tx_backlogged(&self) -> bool {
        self.tx.get().is_some_and(|t| t.queued() > 3 * self.ia.cfg.max_dtos.max(64))
    }

    pub(crate) fn tx(&self) -> Result<&Tx> {
        self.tx.get().ok_or(Error::NotConnected)
    }

    fn check_connected(&self) -> Result<()> {
        match self.state() {
            EpState::Connected => Ok(()),
            EpState::Broken => Err(Error::Broken("endpoint is broken".into())),
            _ => Err(Error::NotConnected),
        }
    }

    /// Sends a response-type frame (ack, nak, read response, atomic response).
    pub(crate) fn respond(&self, mut h: Header, segs: Segs) -> std::io::Result<()> {
        let tx = self.tx.get().expect("connected");
        let mut st = tx.lock();
        h.ack = self.rx_done.load(Ordering::Acquire);
        self.acked_sent.fetch_max(h.ack, Ordering::AcqRel);
        self.frames[0].fetch_add(1, Ordering::Relaxed);
        let pushed = tx.push(&mut st, &h, segs, false, false)?;
        drop(st);
        self.pushed(pushed);
        Ok(())
    }

    /// After a frame was pushed: frames that wait (held for batching, or
    /// queued behind a full socket) need a driver that polls for
    /// writability — waiters blocked now must look again, and the progress
    /// thread, when it polls, too. A waiter that comes (as the poster
    /// usually does next) sends them at once.
    fn pushed(&self, p: Pushed) {
        match p {
            Pushed::Queued(true) => {
                self.kick();
                for evd in self.distinct_evds() {
                    evd.wake();
                }
            }
            // A batch newly open to drivers (not one whose posters ring the
            // doorbell themselves, see `Tx::push`).
            Pushed::Held(true) => self.timer_armed(),
            _ => {}
        }
    }

    /// Posts a request frame: assigns its sequence number and records it in
    /// flight under the transmit lock, so wire order, sequence order and
    /// in-flight order agree.
    fn post_request(
        &self,
        mut h: Header,
        payload: Segs,
        mut inflight: Inflight,
        flags: DtoFlags,
    ) -> Result<()> {
        self.check_connected()?;
        let tx = self.tx()?;
        let mut st = tx.lock();
        let seq = st.next_seq;
        {
            let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            if inf.len() >= self.ia.cfg.max_dtos {
                return Err(Error::QueueFull);
            }
            // Ask for an ack when the user wants a completion, and now and then so the
            // window of suppressed DTOs keeps draining.
            if !flags.contains(DtoFlags::SUPPRESS)
                || seq % 64 == 0
                || inf.len() >= self.ia.cfg.max_dtos / 4
            {
                h.flags |= F_ACK_REQ;
            }
            if flags.contains(DtoFlags::URGENT) {
                h.flags |= F_ACK_REQ | F_ACK_NOW;
            }
            inflight.seq = seq;
            inf.push_back(inflight);
        }
        st.next_seq += 1;
        h.seq = seq;
        h.ack = self.rx_done.load(Ordering::Acquire);
        self.acked_sent.fetch_max(h.ack, Ordering::AcqRel);
        self.frames[0].fetch_add(1, Ordering::Relaxed);
        // Hold a small frame for the next one only while a thread drives this
        // EP (it is waiting, or waited a moment ago and will again, as in a
        // post-post-wait loop): then the batch goes out with the next frame or
        // drive. An EP nobody drives gets its frames written at once, so a
        // post on one EP followed by a wait on another EVD is not delayed.
        let hold = self.ia.cfg.batch && !flags.contains(DtoFlags::URGENT) && self.driven_recently();
        match tx.push(&mut st, &h, payload, false, hold) {
            Ok(pushed) => {
                drop(st);
                self.pushed(pushed);
                Ok(())
            }
            Err(e) => {
                // The post fails, so its DTO must not also complete: take it
                // back out of the in-flight queue (it is the newest entry).
                {
                    let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
                    if inf.back().is_some_and(|f| f.seq == seq) {
                        inf.pop_back();
                    }
                }
                drop(st);
                let msg = format!("send failed: {e}");
                self.shutdown_stream();
                Err(Error::Broken(msg))
            }
        }
    }

    pub(crate) fn shutdown_stream(&self) {
        if let Some(tx) = self.tx.get() {
            let _ = tx.stream().shutdown(std::net::Shutdown::Both);
        }
    }

    /// Completes `c` on the request EVD.
    pub(crate) fn complete(&self, c: DtoCompletion) {
        let evd = if matches!(c.op, DtoOp::Recv | DtoOp::RecvWriteImm) {
            &self.evds.recv
        } else {
            &self.evds.request
        };
        push(evd, Event::Dto(c));
    }

    pub(crate) fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion::new(self.id, Cookie(cookie), op, status, bytes)
    }

    /// Makes the connection live: the stream goes non-blocking, the EP
    /// registers as a driver with its EVDs, its progress thread starts, and
    /// Established is posted.
    pub(crate) fn start(self: &Arc<Self>, stream: TcpStream, peer_pd: Vec<u8>) -> Result<()> {
        let peer = stream.peer_addr().map_err(|e| Error::io("peer_addr", e))?;
        stream.set_nonblocking(true).map_err(|e| Error::io("set non-blocking", e))?;
        let kick = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
            .map_err(|e| Error::io("eventfd", e.into()))?;
        let _ = self.kick_fd.set(kick);
        let _ = self.peer.set(peer);
        if self.tx.set(Tx::new(stream)).is_err() {
            return Err(Error::invalid("endpoint already connected"));
        }
        *self.rx.lock().unwrap_or_else(|e| e.into_inner()) = Some(RxState::new());
        self.set_state(EpState::Connected);
        let me: Arc<dyn Driver> = self.clone();
        for evd in self.distinct_evds() {
            evd.add_driver(&me);
        }
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("rmr-tcp-ep{}", self.id.0))
            .stack_size(256 << 10)
            .spawn(move || me.progress_thread())
            .map_err(|e| Error::io("spawn progress thread", e))?;
        self.push_conn(Event::Established { ep: self.id, private_data: peer_pd });
        Ok(())
    }

    /// The EP's EVDs, each once.
    fn distinct_evds(&self) -> impl Iterator<Item = &SoftEvd> {
        let e = &self.evds;
        let all = [&e.request, &e.recv, &e.conn];
        let mut out: smallvec::SmallVec<[&SoftEvd; 3]> = smallvec::SmallVec::new();
        for x in all {
            if let Some(s) = x.as_any().downcast_ref::<SoftEvd>() {
                if !out.iter().any(|o| std::ptr::eq(*o, s)) {
                    out.push(s);
                }
            }
        }
        out.into_iter()
    }

    /// Unregisters from the EVDs (the connection ended).
    pub(crate) fn detach(&self) {
        for evd in self.distinct_evds() {
            evd.remove_driver(self);
        }
    }

    pub(crate) fn push_conn(&self, ev: Event) {
        push(&self.evds.conn, ev);
    }

    /// Wakes the progress thread.
    pub(crate) fn kick(&self) {
        if let Some(k) = self.kick_fd.get() {
            let _ = rustix::io::write(k, &1u64.to_ne_bytes());
        }
    }

    /// A one-line picture of the endpoint's progress state (for diagnostics).
    pub(crate) fn progress_note(&self) -> String {
        let inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner()).len();
        let recvs = self.recvs.lock().unwrap_or_else(|e| e.into_inner()).len();
        let txq = self.tx.get().map_or(0, |t| t.queued());
        let txb = self.tx.get().map_or(0, |t| t.tx_bytes.load(Ordering::Relaxed));
        let rx = match self.rx.try_lock() {
            Ok(g) => g.as_ref().map_or("none".into(), |r| r.describe()),
            Err(_) => "busy".into(),
        };
        format!(
            "state={:?} inflight={inflight} recvs={recvs} txq={txq} tx_bytes={txb} rx=[{rx}] frames tx/rx={}/{} rx_done={} acked_sent={} acked_rcvd={} ack_due={:?} stalled={} active={} deep={} bg_polling={}",
            self.state(),
            self.frames[0].load(Ordering::Relaxed),
            self.frames[1].load(Ordering::Relaxed),
            self.rx_done.load(Ordering::SeqCst),
            self.acked_sent.load(Ordering::SeqCst),
            self.acked_rcvd.load(Ordering::SeqCst),
            self.ack_due.at().map(|d| d.saturating_duration_since(Instant::now())),
            self.stalled.load(Ordering::SeqCst),
            self.active.load(Ordering::SeqCst),
            self.deep.load(Ordering::SeqCst),
            self.bg_polling.load(Ordering::SeqCst),
        )
    }

    /// The watchdog's look at this EP while its progress thread stands back
    /// (`seen`/`same`: the EP's wait count at the last look, and looks since
    /// it changed).
    fn watch_look(&self, seen: &mut u64, same: &mut u32) -> Look {
        if self.ended.load(Ordering::Acquire) {
            return Look::Wake;
        }
        if self.active.load(Ordering::SeqCst) == 0 {
            return if self.driven_recently() { Look::Keep } else { Look::Wake };
        }
        let w = self.waits.load(Ordering::SeqCst);
        if w != *seen {
            (*seen, *same) = (w, 0);
            return Look::Keep;
        }
        *same += 1;
        if *same < DEEP_AFTER { Look::Keep } else { Look::Deep }
    }

    /// Whether an application thread drives this EP now or did within [`LINGER`].
    fn driven_recently(&self) -> bool {
        self.active.load(Ordering::SeqCst) > 0
            || now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst))
                < LINGER.as_nanos() as u64
    }

    /// Schedules an acknowledgement `delay` from now (unless one is due sooner).
    ///
    /// A deadline whose acknowledgements all went out since (a reply
    /// carried them) is stale: it is replaced, not kept. Kept, it would send
    /// this new acknowledgement alone as soon as it passed, however soon
    /// the reply to this frame follows (in a ping-pong of signalled writes:
    /// an extra frame and a wake-up of the peer in many round trips).
    pub(crate) fn arm_ack(&self, delay: Duration) {
        let at = Instant::now() + delay;
        let rx_done = self.rx_done.load(Ordering::Acquire);
        let d = self.ack_due.raw();
        // (Only the receive side arms; a driver taking the deadline meanwhile
        // makes the replacement fail, and the set below arms anew.)
        let stale = self.acked_sent.load(Ordering::Acquire) >= self.ack_for.load(Ordering::Acquire);
        if stale && self.ack_due.replace(d, at) {
            // (Later than the one replaced: a thread polling with that one
            // wakes on it and takes this one; no need to wake it now.)
            self.ack_for.store(rx_done, Ordering::Release);
            return;
        }
        if self.ack_due.set_if_none(at) {
            self.ack_for.store(rx_done, Ordering::Release);
            self.timer_armed();
        }
    }

    /// A new deadline exists: threads blocked in `poll` with an older one
    /// (the progress thread, waiters on the EVDs) must look again.
    fn timer_armed(&self) {
        if self.bg_polling.load(Ordering::SeqCst) {
            self.kick();
        }
        for evd in self.distinct_evds() {
            evd.wake();
        }
    }

    /// Sends the delayed acknowledgement once due, if no frame carried it.
    pub(crate) fn ack_timer(&self) -> bool {
        if !self.ack_due.take_passed() {
            return false;
        }
        let mut w = true;
        if self.send_ack_if_wanted(&mut w).is_err() {
            self.shutdown_stream();
        }
        true
    }

    pub(crate) fn stall(&self, until: Instant) {
        self.stall_until.set(until);
        self.stalled.store(true, Ordering::SeqCst);
        self.timer_armed();
    }

    pub(crate) fn unstall(&self) {
        if self.stalled.swap(false, Ordering::SeqCst) {
            self.stall_until.clear();
        }
    }

    /// A receive was posted while the receive side waited for one: go on
    /// here if nobody else is reading, and wake whoever waits in any case.
    fn resume(&self) {
        if !self.stalled.load(Ordering::SeqCst) {
            return;
        }
        self.drive_rx();
        if self.stalled.load(Ordering::SeqCst) {
            return;
        }
        self.kick();
        for evd in self.distinct_evds() {
            evd.wake();
        }
    }

    /// Runs the receive side if no other thread does. Returns whether it moved.
    fn drive_rx(&self) -> bool {
        let Some(tx) = self.tx.get() else { return false };
        let Ok(mut g) = self.rx.try_lock() else { return false };
        let Some(rx) = g.as_mut() else { return false };
        match self.read_ready(rx, tx.stream()) {
            Ok(m) => {
                // Ended meanwhile by another thread, which could not take
                // the receive state from us: what we were placing ends too.
                if self.ended.load(Ordering::Acquire) {
                    if let Some(c) = rx.take_owed() {
                        drop(g);
                        self.complete_ended(c, Status::Flushed);
                    }
                }
                m
            }
            Err(end) => {
                let owed = rx.take_owed();
                drop(g);
                self.finish_owing(end, owed);
                true
            }
        }
    }

    /// The EP's own progress: it drives the EP whenever no application
    /// thread has for [`LINGER`], and sleeps while one does.
    fn progress_thread(self: Arc<Self>) {
        let Some(kick) = self.kick_fd.get() else { return };
        let drain = || {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(kick, &mut b);
        };
        while !self.ended.load(Ordering::Acquire) {
            let active = self.active.load(Ordering::SeqCst);
            let since =
                Duration::from_nanos(now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst)));
            if active > 0 || since < LINGER {
                // Stand back while an application thread drives: asleep, the
                // process's watchdog wakes us once the drivers have left (or
                // the leaving waiter does, after one long wait).
                let timeout = if active > 0 {
                    (!WATCHDOG.watch(&self)).then_some(WATCH_EVERY)
                } else {
                    Some(LINGER - since)
                };
                let mut fds = [PollFd::new(kick, PollFlags::IN)];
                let ts = timeout
                    .map(|t| Timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ });
                let _ = poll(&mut fds, ts.as_ref());
                self.deep.store(false, Ordering::SeqCst);
                drain();
                continue;
            }
            // Announce the poll below, so that a waiter arriving meanwhile moves us
            // out of it (its timers would not be in our deadline).
            self.bg_polling.store(true, Ordering::SeqCst);
            if self.active.load(Ordering::SeqCst) > 0 {
                self.bg_polling.store(false, Ordering::SeqCst);
                continue;
            }
            {
                let w = self.wait_on();
                let mut fds: smallvec::SmallVec<[PollFd<'_>; 2]> =
                    smallvec::smallvec![PollFd::new(kick, PollFlags::IN)];
                if let Some((fd, i)) = w.fd {
                    let mut f = PollFlags::empty();
                    if i.read {
                        f |= PollFlags::IN;
                    }
                    if i.write {
                        f |= PollFlags::OUT;
                    }
                    fds.push(PollFd::from_borrowed_fd(fd, f));
                }
                let ts = w.deadline.map(|d| {
                    let t = d.saturating_duration_since(Instant::now());
                    Timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ }
                });
                let _ = poll(&mut fds, ts.as_ref());
            }
            self.bg_polling.store(false, Ordering::SeqCst);
            drain();
            if self.active.load(Ordering::SeqCst) == 0
                && self.drive()
                && self.active.load(Ordering::SeqCst) > 0
            {
                // A waiter came in while this thread drove, found the receive
                // side busy and went to poll the socket that this thread had
                // just emptied. What landed may raise no event (an RDMA write
                // into memory the waiter polls, see SoftEvd::drive_until):
                // wake it to look again.
                for evd in self.distinct_evds() {
                    evd.wake();
                }
            }
        }
        self.detach();
    }

    /// Orderly close from this side.
    pub(crate) fn disconnect(&self) -> Result<()> {
        if !self.cas_state(EpState::Connected, EpState::Disconnected) {
            return Err(Error::NotConnected);
        }
        self.local_disconnect.store(true, Ordering::Release);
        let tx = self.tx()?;
        let mut st = tx.lock();
        let mut h = Header::new(Op::Disconnect);
        h.ack = self.rx_done.load(Ordering::Acquire);
        let r = tx.push(&mut st, &h, Segs::new(), true, false);
        drop(st);
        match r {
            Ok(p) => self.pushed(p),
            Err(_) => self.shutdown_stream(),
        }
        // A peer that never answers must not keep the EP forever.
        self.disconnect_until.set(Instant::now() + DISCONNECT_WAIT);
        self.kick();
        Ok(())
    }
}

impl Driver for EpShared {
    fn drive(&self) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        let Some(tx) = self.tx.get() else { return false };
        let mut moved = match tx.flush() {
            Ok(m) => m,
            Err(e) => {
                // End here, with the cause: the receive side would only see
                // the stream closed once the error was consumed by the send.
                self.finish(End::Broken(format!("send: {e}")));
                return true;
            }
        };
        moved |= self.drive_rx();
        moved |= self.ack_timer();
        let overdue = self.disconnect_until.passed();
        if overdue && !self.ended.load(Ordering::Acquire) {
            self.finish(End::Orderly);
            moved = true;
        }
        moved
    }

    fn flush(&self) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return false;
        }
        let Some(tx) = self.tx.get() else { return false };
        match tx.flush_all() {
            Ok(m) => m,
            Err(_) => {
                // The receive side sees the error and ends the connection.
                self.shutdown_stream();
                true
            }
        }
    }

    fn wait_on(&self) -> WaitOn<'_> {
        let Some(tx) = self.tx.get().filter(|_| !self.ended.load(Ordering::Acquire)) else {
            return WaitOn { fd: None, deadline: None };
        };
        let stalled = self.stalled.load(Ordering::SeqCst);
        let (queued, held) = tx.pending();
        let interest = Interest { read: !stalled && !self.tx_backlogged(), write: queued || held };
        let stall = if stalled { self.stall_until.at() } else { None };
        let (disc, ack) = (self.disconnect_until.at(), self.ack_due.at());
        let deadline = [stall, disc, ack, tx.deferred_due()].into_iter().flatten().min();
        let fd = (interest.read || interest.write).then(|| (tx.stream().as_fd(), interest));
        WaitOn { fd, deadline }
    }

    fn enter(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.waits.fetch_add(1, Ordering::SeqCst);
        if self.bg_polling.load(Ordering::SeqCst) {
            self.kick();
        }
    }

    fn leave(&self) {
        self.stamp_left(now_ns());
    }

    fn leave_at(&self, now: Instant) {
        self.stamp_left(now.saturating_duration_since(base()).as_nanos() as u64);
    }
}

impl EpShared {
    /// [`Driver::leave`] at `at` (ns after [`base`]).
    fn stamp_left(&self, at: u64) {
        self.left_at.store(at, Ordering::SeqCst);
        if self.active.fetch_sub(1, Ordering::SeqCst) == 1 && self.deep.load(Ordering::SeqCst) {
            self.kick();
        }
    }
}

/// What the watchdog does with an EP it looked at.
enum Look {
    /// Look again next time.
    Keep,
    /// Wake the progress thread: its drivers left (or the EP ended).
    Wake,
    /// One wait has lasted: the waiter wakes the progress thread on leaving.
    Deep,
}

/// The process's progress watchdog: one thread that looks, every
/// [`WATCH_EVERY`], at the endpoints whose progress threads stand back
/// while application threads drive them, and wakes a progress thread once
/// its endpoint's drivers have left. One timer for the process, however
/// many endpoints its waiters drive (a waiter on an EVD that many
/// endpoints share drives them all), where each progress thread used to
/// wake on its own every couple of milliseconds. The thread runs only
/// while there is something to watch: it ends [`WATCH_IDLE`] after the
/// last endpoint left its list, and the next one to stand back starts it
/// again.
struct Watchdog {
    st: Mutex<WatchState>,
    cv: Condvar,
}

struct WatchState {
    /// The watched EPs, with their wait count at the last look and the
    /// looks since it changed.
    eps: Vec<(Weak<EpShared>, u64, u32)>,
    running: bool,
}

/// How long the watchdog thread stays with nothing to watch.
const WATCH_IDLE: Duration = Duration::from_millis(100);

static WATCHDOG: Watchdog =
    Watchdog { st: Mutex::new(WatchState { eps: Vec::new(), running: false }), cv: Condvar::new() };

impl Watchdog {
    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks after `ep` (its progress thread is about to sleep) until its
    /// drivers leave. False when there is no watchdog thread (none could be
    /// started: the process is out of threads); the progress thread then
    /// looks for itself, every [`WATCH_EVERY`].
    fn watch(&'static self, ep: &Arc<EpShared>) -> bool {
        if ep.watched.load(Ordering::SeqCst) {
            return true;
        }
        let mut st = self.lock();
        if !st.running {
            let t = std::thread::Builder::new().name("rmr-tcp-watch".into());
            if t.spawn(move || self.run()).is_err() {
                return false;
            }
            st.running = true;
        }
        if !ep.watched.swap(true, Ordering::SeqCst) {
            st.eps.push((Arc::downgrade(ep), ep.waits.load(Ordering::SeqCst), 0));
            self.cv.notify_one();
        }
        true
    }

    fn run(&self) {
        let mut st = self.lock();
        loop {
            if st.eps.is_empty() {
                st = self.cv.wait_timeout(st, WATCH_IDLE).unwrap_or_else(|e| e.into_inner()).0;
                if st.eps.is_empty() {
                    st.running = false;
                    return;
                }
                continue;
            }
            drop(st);
            std::thread::sleep(WATCH_EVERY);
            st = self.lock();
            st.eps.retain_mut(|(w, seen, same)| {
                let Some(ep) = w.upgrade() else { return false };
                let look = ep.watch_look(seen, same);
                if matches!(look, Look::Keep) {
                    return true;
                }
                // Unwatched before the wake-up, so that the woken thread
                // can ask to be watched again.
                ep.watched.store(false, Ordering::SeqCst);
                match look {
                    Look::Deep => {
                        ep.deep.store(true, Ordering::SeqCst);
                        // A waiter that left meanwhile may not have seen `deep`.
                        if ep.active.load(Ordering::SeqCst) == 0 {
                            ep.kick();
                        }
                    }
                    _ => ep.kick(),
                }
                false
            });
        }
    }
}

/// An endpoint of the TCP backend. Dropping the last handle disconnects.
pub struct TcpEp {
    pub(crate) sh: Arc<EpShared>,
}

impl TcpEp {
    pub(crate) fn create(ia: Arc<IaShared>, pz_id: u64, evds: EpEvds) -> Arc<dyn Ep> {
        Arc::new(TcpEp {
            sh: Arc::new(EpShared {
                id: EpId::fresh(),
                ia,
                pz_id,
                evds,
                state: AtomicU8::new(0),
                tx: OnceLock::new(),
                rx: Mutex::new(None),
                peer: OnceLock::new(),
                inflight: Mutex::new(VecDeque::new()),
                recvs: Mutex::new(VecDeque::new()),
                rx_done: AtomicU64::new(0),
                acked_sent: AtomicU64::new(0),
                acked_rcvd: AtomicU64::new(0),
                frames: [AtomicU64::new(0), AtomicU64::new(0)],
                ended: AtomicBool::new(false),
                local_disconnect: AtomicBool::new(false),
                stalled: AtomicBool::new(false),
                stall_until: Deadline::none(),
                disconnect_until: Deadline::none(),
                ack_due: Deadline::none(),
                ack_for: AtomicU64::new(0),
                active: AtomicUsize::new(0),
                waits: AtomicU64::new(0),
                left_at: AtomicU64::new(0),
                deep: AtomicBool::new(false),
                bg_polling: AtomicBool::new(false),
                kick_fd: OnceLock::new(),
                watched: AtomicBool::new(false),
            }),
        })
    }

    fn segs(&self, local: &[Sge<'_>]) -> Segs {
        local
            .iter()
            .filter(|s| s.len > 0)
            .map(|s| Seg {
                region: s.lmr.region().clone(),
                off: s.lmr.offset() + s.offset,
                len: s.len,
            })
            .collect()
    }

    fn check(&self, local: &[Sge<'_>], need: Access) -> Result<u64> {
        let total = check_local_sges(local, self.sh.pz_id, need, self.sh.ia.attr.max_sges)?;
        if total > wire::MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "{total} bytes exceed the {} limit",
                wire::MAX_PAYLOAD
            )));
        }
        Ok(total)
    }

    fn remote_hdr(op: Op, remote: &RmrContext, remote_offset: u64, len: u64) -> Result<Header> {
        if remote_offset.checked_add(len).is_none_or(|e| e > remote.len) {
            return Err(Error::OutOfBounds { offset: remote_offset, len, limit: remote.len });
        }
        let mut h = Header::new(op);
        h.key = remote.key();
        h.addr = remote.addr + remote_offset;
        Ok(h)
    }

    fn inflight(cookie: u64, op: DtoOp, flags: DtoFlags, bytes: u64, dest: Segs) -> Inflight {
        Inflight { seq: 0, cookie, op, signalled: !flags.contains(DtoFlags::SUPPRESS), bytes, dest }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &self,
        op: Op,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        args: (u64, u64),
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        if result.len != 8 {
            return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
        }
        if (remote.addr + remote_offset) % 8 != 0 {
            return Err(Error::invalid("atomic target must be 8-byte aligned"));
        }
        self.check(&[result], Access::LOCAL_WRITE)?;
        let mut h = Self::remote_hdr(op, remote, remote_offset, 8)?;
        (h.arg0, h.arg1) = args;
        let dop = if op == Op::FetchAdd { DtoOp::FetchAdd } else { DtoOp::CmpSwap };
        let inf = Self::inflight(cookie, dop, flags, 8, self.segs(&[result]));
        self.sh.post_request(h, Segs::new(), inf, flags)
    }
}

impl Drop for TcpEp {
    fn drop(&mut self) {
        let _ = self.sh.disconnect();
    }
}

fn handshake_read(stream: &mut TcpStream) -> Result<(Op, Vec<u8>)> {
    let mut hb = [0u8; HDR];
    stream.read_exact(&mut hb).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout,
        _ => Error::io("connection handshake", e),
    })?;
    let h = Header::decode(&hb);
    let op = h.validate().map_err(|e| Error::Protocol(e.to_string()))?;
    let mut pd = vec![0u8; h.len as usize];
    stream.read_exact(&mut pd).map_err(|e| Error::io("connection handshake", e))?;
    Ok((op, pd))
}

pub(crate) fn handshake_write(stream: &mut TcpStream, op: Op, pd: &[u8]) -> std::io::Result<()> {
    let mut h = Header::new(op);
    h.len = pd.len() as u32;
    if op == Op::ConnReq {
        h.arg0 = wire::MAGIC;
    }
    let mut buf = Vec::with_capacity(HDR + pd.len());
    buf.extend_from_slice(&h.encode());
    buf.extend_from_slice(pd);
    stream.write_all(&buf)
}

impl Ep for TcpEp {
    fn id(&self) -> EpId {
        self.sh.id
    }

    fn attr(&self) -> EpAttr {
        let a = &self.sh.ia.attr;
        EpAttr {
            max_msg_size: a.max_msg_size,
            max_dtos: self.sh.ia.cfg.max_dtos,
            max_recvs: self.sh.ia.cfg.max_recvs,
            max_sges: a.max_sges,
            notes: vec![("progress".into(), self.sh.progress_note())],
        }
    }

    fn state(&self) -> EpState {
        self.sh.state()
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        if pd.len() > wire::MAX_PRIVATE {
            return Err(Error::invalid(format!("private data over {} bytes", wire::MAX_PRIVATE)));
        }
        let ip: IpAddr = remote.parse().map_err(|_| Error::BadSpec {
            spec: remote.into(),
            why: "expected an IP address".into(),
        })?;
        if !self.sh.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("endpoint is not in the unconnected state"));
        }
        let res = (|| {
            let start = Instant::now();
            let to = SocketAddr::new(ip, service);
            let sock = socket2::Socket::new(
                socket2::Domain::for_address(to),
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )
            .map_err(|e| Error::io("socket", e))?;
            sock.bind(&SocketAddr::new(self.sh.ia.ip, 0).into())
                .map_err(|e| Error::io(format!("bind {}", self.sh.ia.ip), e))?;
            sock.connect_timeout(&to.into(), timeout).map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Error::Timeout,
                _ => Error::io(format!("connect {to}"), e),
            })?;
            let mut stream: TcpStream = sock.into();
            tune(&stream, self.sh.ia.cfg.user_timeout)
                .map_err(|e| Error::io("socket options", e))?;
            handshake_write(&mut stream, Op::ConnReq, pd)
                .map_err(|e| Error::io("send request", e))?;
            let left = timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
            stream.set_read_timeout(Some(left)).map_err(|e| Error::io("set timeout", e))?;
            let (op, peer_pd) = handshake_read(&mut stream)?;
            stream.set_read_timeout(None).map_err(|e| Error::io("set timeout", e))?;
            match op {
                Op::ConnAccept => Ok((stream, peer_pd)),
                Op::ConnReject => {
                    push(
                        &self.sh.evds.conn,
                        Event::Rejected { ep: self.sh.id, private_data: peer_pd.clone() },
                    );
                    Err(Error::Rejected { private_data: peer_pd })
                }
                other => Err(Error::Protocol(format!("unexpected {other:?} in handshake"))),
            }
        })();
        match res {
            Ok((stream, peer_pd)) => {
                self.sh.start(stream, peer_pd.clone())?;
                Ok(peer_pd)
            }
            Err(e) => {
                self.sh.set_state(EpState::Unconnected);
                Err(e)
            }
        }
    }

    fn disconnect(&self) -> Result<()> {
        self.sh.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        let total = self.check(local, Access::empty())?;
        let mut h = Header::new(Op::Send);
        h.len = total as u32;
        if flags.contains(DtoFlags::SOLICITED) {
            h.flags |= F_SOLICITED;
        }
        let inf = Self::inflight(cookie, DtoOp::Send, flags, total, Segs::new());
        self.sh.post_request(h, self.segs(local), inf, flags)
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, _flags: DtoFlags) -> Result<()> {
        let cookie = cookie.0;
        let total = self.check(local, Access::LOCAL_WRITE)?;
        match self.sh.state() {
            EpState::Disconnected | EpState::Broken => return Err(Error::NotConnected),
            _ => {}
        }
        let mut q = self.sh.recvs.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= self.sh.ia.cfg.max_recvs {
            return Err(Error::QueueFull);
        }
        q.push_back(RecvWr { cookie, segs: self.segs(local), total });
        drop(q);
        self.sh.resume();
        Ok(())
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let total = self.check(local, Access::empty())?;
        let mut h = Self::remote_hdr(Op::Write, remote, remote_offset, total)?;
        h.len = total as u32;
        let inf = Self::inflight(cookie, DtoOp::RdmaWrite, flags, total, Segs::new());
        self.sh.post_request(h, self.segs(local), inf, flags)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let total = self.check(local, Access::LOCAL_WRITE)?;
        let mut h = Self::remote_hdr(Op::ReadReq, remote, remote_offset, total)?;
        h.arg0 = total;
        let inf = Self::inflight(cookie, DtoOp::RdmaRead, flags, total, self.segs(local));
        self.sh.post_request(h, Segs::new(), inf, flags)
    }

    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        imm: u32,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let total = self.check(local, Access::empty())?;
        let mut h = Self::remote_hdr(Op::WriteImm, remote, remote_offset, total)?;
        h.len = total as u32;
        h.arg0 = u64::from(imm);
        let inf = Self::inflight(cookie, DtoOp::RdmaWrite, flags, total, Segs::new());
        self.sh.post_request(h, self.segs(local), inf, flags)
    }

    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        add: u64,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        self.atomic(Op::FetchAdd, result, remote, remote_offset, (add, 0), cookie, flags)
    }

    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        op: CompareSwap,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let (remote, remote_offset, cookie) = (remote.ctx, remote.offset, cookie.0);
        let CompareSwap { compare, swap } = op;
        self.atomic(Op::CmpSwap, result, remote, remote_offset, (compare, swap), cookie, flags)
    }

    fn close(&self, timeout: Duration) -> Result<()> {
        match self.sh.disconnect() {
            Ok(()) | Err(Error::NotConnected) => {}
            Err(e) => return Err(e),
        }
        // The disconnect frame follows every frame posted before it; the
        // peer answers it once it has handled them all. Wait for that end,
        // driving the socket meanwhile.
        let deadline = Instant::now() + timeout;
        let sh = &*self.sh;
        sh.enter();
        let r = loop {
            if sh.ended.load(Ordering::Acquire) {
                break Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                break Err(Error::Timeout);
            }
            if !sh.drive() {
                // Nothing moved: block on the socket (or until the
                // backend's next timer) for at most a millisecond.
                let w = sh.wait_on();
                let until = [Some(deadline), w.deadline, Some(now + Duration::from_millis(1))];
                let left = until.into_iter().flatten().min().unwrap_or(deadline) - now;
                match w.fd {
                    Some((fd, i)) => {
                        use rustix::event::{PollFd, PollFlags, Timespec, poll};
                        let mut ev = PollFlags::empty();
                        ev.set(PollFlags::IN, i.read);
                        ev.set(PollFlags::OUT, i.write);
                        let ts = Timespec { tv_sec: 0, tv_nsec: left.subsec_nanos() as i64 };
                        let _ = poll(&mut [PollFd::new(&fd, ev)], Some(&ts));
                    }
                    None => std::thread::yield_now(),
                }
            }
        };
        sh.leave();
        r
    }

    fn peer_address(&self) -> Option<String> {
        self.sh.peer.get().map(|p| p.ip().to_string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
