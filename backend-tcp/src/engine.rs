//! The IA's progress engine, [`Engine`]: one `epoll` set over the sockets
//! of all the IA's connected endpoints and at most one helper thread that
//! drives the endpoints nobody waits on (acknowledgements, RDMA reads and
//! atomics served at the target, flow control, timers).
//!
//! Application threads still drive their endpoints themselves while they
//! wait on an EVD (no hand-off, see the crate docs); the helper stands back
//! from an endpoint while one does, looks every `watch` (the IA's
//! [`TcpConfig::watch`](crate::TcpConfig::watch)) whether its
//! drivers have left (or, after a long wait, lets the leaving waiter tell
//! it), and takes the endpoint over once they have; after a takeover it
//! looks more often for a while (`rmr_api::provider::Handover`), so
//! that threads that compute between waits hand it over within about
//! `LINGER` of leaving. An endpoint in the set
//! is armed one-shot: the helper hears about a socket at most once per
//! look, and not at all while an application thread drives it. An idle
//! endpoint costs one entry in the set and no thread and no wake-up; the
//! helper ends [`IDLE`] after the IA's last endpoint went, and the next
//! connection starts it again.
//!
//! The engine knows endpoints only as [`Tended`]: what to watch, and what
//! to do next when it looks.

use rmr_api::provider::clock::helper_grain;
use rustix::buffer::spare_capacity;
use rustix::event::{EventfdFlags, Timespec, epoll, eventfd};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the helper thread stays with no endpoint to look after.
pub(crate) const IDLE: Duration = Duration::from_millis(100);

/// The `epoll` datum of the engine's own wake-up eventfd.
const WAKE: u64 = u64::MAX;

/// No slot (an endpoint not registered yet, or gone).
pub(crate) const NO_SLOT: usize = usize::MAX;

/// What the helper does with an endpoint after looking at it.
#[derive(Debug)]
pub(crate) enum Next {
    /// Nobody drives it: wake on its socket for reading and/or writing,
    /// and at `deadline` (its next timer). With neither interest (and not
    /// `errors`), only at `deadline` (or when kicked): the helper stands back from an
    /// endpoint a thread drives or just left, and looks again then.
    /// `errors` alone: wake on its socket's errors only (the error queue
    /// of zero-copy notices; epoll reports errors whatever it is asked).
    Arm { read: bool, write: bool, errors: bool, deadline: Option<Instant> },
    /// An application thread drives it, or did a moment ago: watch for
    /// its drivers to leave.
    Watch,
    /// Its connection ended: forget it.
    Gone,
}

/// What the helper does with an endpoint it watches, at each look.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Watched {
    /// Look again next time.
    Stay,
    /// Look at it now ([`Tended::tend`]): its drivers have left.
    Tend,
    /// Stop watching: the endpoint's waiter kicks the helper on leaving.
    Leave,
}

/// An endpoint as the engine sees it.
pub(crate) trait Tended: Send + Sync {
    /// The socket to wait on.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Where the engine keeps the endpoint's slot ([`NO_SLOT`] for none).
    fn slot(&self) -> &AtomicUsize;
    /// Set while a kick of this endpoint waits for the helper.
    fn kick_pending(&self) -> &AtomicBool;
    /// Looks at the endpoint (driving it if nobody else does) and says
    /// what next.
    fn tend(&self) -> Next;
    /// One look at a watched endpoint; `seen`/`same` are the watch state
    /// the engine keeps for it (the endpoint's wait count at the last look,
    /// and the looks since it changed; `u64::MAX` at first).
    fn look(&self, seen: &mut u64, same: &mut u32) -> Watched;
}

/// One IA's progress engine.
pub(crate) struct Engine {
    epoll: OwnedFd,
    wake: OwnedFd,
    st: Mutex<State>,
    name: String,
    /// How often the helper looks at endpoints application threads drive.
    watch: Duration,
}

#[derive(Default)]
struct State {
    incoming: Vec<Arc<dyn Tended>>,
    kicked: Vec<usize>,
    running: bool,
}

/// The helper's record of one endpoint.
struct Slot {
    t: Arc<dyn Tended>,
    /// Armed in the set (one-shot; disarmed once it fired).
    armed: bool,
    /// The earliest look scheduled in the timer heap.
    timer: Option<Instant>,
    watched: bool,
    /// In the helper's watch list (which drops endpoints no longer watched
    /// at its next look).
    listed: bool,
    seen: u64,
    same: u32,
}

impl Engine {
    /// An engine for the IA named `name` (its thread's name).
    pub(crate) fn new(name: String, watch: Duration) -> std::io::Result<Engine> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let wake = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        epoll::add(&epoll, &wake, epoll::EventData::new_u64(WAKE), epoll::EventFlags::IN)?;
        Ok(Engine { epoll, wake, st: Mutex::new(State::default()), name, watch })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ring(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }

    /// Hands a newly connected endpoint to the engine, starting its helper
    /// thread if it is not running.
    pub(crate) fn register(self: &Arc<Self>, t: Arc<dyn Tended>) -> std::io::Result<()> {
        let mut st = self.lock();
        if !st.running {
            let me = self.clone();
            std::thread::Builder::new().name(self.name.clone()).stack_size(256 << 10).spawn(
                move || {
                    // Its work comes in bursts of microseconds, often on a
                    // CPU an application thread computes on.
                    rmr_api::provider::short_slices();
                    me.run()
                },
            )?;
            st.running = true;
        }
        st.incoming.push(t);
        drop(st);
        self.ring();
        Ok(())
    }

    /// Asks the helper to look at the endpoint in `slot` soon.
    pub(crate) fn kick(&self, slot: &AtomicUsize, pending: &AtomicBool) {
        let i = slot.load(Ordering::Acquire);
        if i == NO_SLOT || pending.swap(true, Ordering::AcqRel) {
            return;
        }
        self.lock().kicked.push(i);
        self.ring();
    }

    /// The helper thread.
    fn run(self: Arc<Self>) {
        let mut h = Helper {
            eng: &self,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            timers: BinaryHeap::new(),
            watch: Vec::new(),
            next_tick: Instant::now(),
        };
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let mut todo: Vec<usize> = Vec::new();
        let mut idle_since = Instant::now();
        loop {
            let now = Instant::now();
            let mut until = h.timers.peek().map(|r| r.0.0);
            if !h.watch.is_empty() {
                until = Some(until.map_or(h.next_tick, |u| u.min(h.next_tick)));
            }
            if h.live == 0 {
                let end = idle_since + IDLE;
                until = Some(until.map_or(end, |u| u.min(end)));
            }
            let ts = until.map(|u| {
                let t = helper_grain(u.saturating_duration_since(now));
                Timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ }
            });
            events.clear();
            // Whole milliseconds (`helper_grain`): a timer due in 200 us
            // fires about 1 ms from now. The handover's timing is tuned to
            // that; precise timers made the helper take endpoints over in
            // the middle of short compute phases, which slowed the DSM
            // runtime's two-host Jacobi (BENCHMARKS.md, "Reads aimed at a
            // process that computes").
            let _ = epoll::wait(&self.epoll, spare_capacity(&mut events), ts.as_ref());
            for ev in &events {
                let d = ev.data.u64();
                if d == WAKE {
                    let mut b = [0u8; 8];
                    let _ = rustix::io::read(&self.wake, &mut b);
                } else if let Some(Some(s)) = h.slots.get_mut(d as usize) {
                    s.armed = false;
                    todo.push(d as usize);
                }
            }
            {
                let mut st = self.lock();
                for t in std::mem::take(&mut st.incoming) {
                    if let Some(i) = h.add(t) {
                        todo.push(i);
                    }
                }
                for i in st.kicked.drain(..) {
                    if let Some(Some(s)) = h.slots.get(i) {
                        s.t.kick_pending().store(false, Ordering::Release);
                    }
                    todo.push(i);
                }
                if h.live == 0 && idle_since.elapsed() >= IDLE {
                    st.running = false;
                    return;
                }
            }
            let now = Instant::now();
            while let Some(&Reverse((at, i))) = h.timers.peek() {
                if at > now {
                    break;
                }
                h.timers.pop();
                if let Some(Some(s)) = h.slots.get_mut(i) {
                    if s.timer == Some(at) {
                        s.timer = None;
                        todo.push(i);
                    }
                }
            }
            if !h.watch.is_empty() && now >= h.next_tick {
                h.tick(&mut todo);
                h.next_tick = now + self.watch;
            }
            for i in todo.drain(..) {
                h.tend(i);
            }
            if h.live > 0 {
                idle_since = Instant::now();
            }
        }
    }
}

/// The helper thread's own state.
struct Helper<'e> {
    eng: &'e Engine,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    live: usize,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    watch: Vec<usize>,
    next_tick: Instant,
}

impl Helper<'_> {
    fn add(&mut self, t: Arc<dyn Tended>) -> Option<usize> {
        let i = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        // Registered disarmed: the first look arms it.
        let ev = epoll::EventData::new_u64(i as u64);
        if epoll::add(&self.eng.epoll, t.fd(), ev, epoll::EventFlags::ONESHOT).is_err() {
            // Out of memory for the set: the endpoint's waiters still drive
            // it; only nobody does so while none waits.
            self.free.push(i);
            return None;
        }
        t.slot().store(i, Ordering::Release);
        self.slots[i] = Some(Slot {
            t,
            armed: false,
            timer: None,
            watched: false,
            listed: false,
            seen: u64::MAX,
            same: 0,
        });
        self.live += 1;
        Some(i)
    }

    fn tick(&mut self, todo: &mut Vec<usize>) {
        let slots = &mut self.slots;
        self.watch.retain(|&i| {
            let Some(Some(s)) = slots.get_mut(i) else { return false };
            let stay = s.watched
                && match s.t.look(&mut s.seen, &mut s.same) {
                    Watched::Stay => true,
                    Watched::Tend => {
                        todo.push(i);
                        false
                    }
                    Watched::Leave => false,
                };
            (s.watched, s.listed) = (stay, stay);
            stay
        });
    }

    fn schedule(&mut self, i: usize, at: Instant) {
        let Some(Some(s)) = self.slots.get_mut(i) else { return };
        if s.timer.is_none_or(|t| at < t) {
            s.timer = Some(at);
            self.timers.push(Reverse((at, i)));
        }
    }

    fn tend(&mut self, i: usize) {
        let Some(Some(s)) = self.slots.get_mut(i) else { return };
        match s.t.tend() {
            Next::Gone => {
                if s.listed {
                    self.watch.retain(|&j| j != i);
                }
                let _ = epoll::delete(&self.eng.epoll, s.t.fd());
                s.t.slot().store(NO_SLOT, Ordering::Release);
                self.slots[i] = None;
                self.free.push(i);
                self.live -= 1;
            }
            Next::Watch => {
                if !s.watched {
                    (s.watched, s.seen, s.same) = (true, u64::MAX, 0);
                    if !s.listed {
                        s.listed = true;
                        if self.watch.is_empty() {
                            self.next_tick = Instant::now() + self.eng.watch;
                        }
                        self.watch.push(i);
                    }
                }
            }
            Next::Arm { read, write, errors, deadline } => {
                s.watched = false;
                if read || write || errors {
                    // Level-triggered and one-shot: what is ready now fires
                    // at once; nothing fires again until the next look.
                    let mut f = epoll::EventFlags::ONESHOT;
                    f.set(epoll::EventFlags::IN, read);
                    f.set(epoll::EventFlags::OUT, write);
                    let ev = epoll::EventData::new_u64(i as u64);
                    s.armed = epoll::modify(&self.eng.epoll, s.t.fd(), ev, f).is_ok();
                }
                if let Some(at) = deadline {
                    self.schedule(i, at);
                }
            }
        }
    }
}
