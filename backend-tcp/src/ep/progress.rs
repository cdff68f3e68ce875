//! Progress: driving the socket from whichever thread waits (the
//! [`Driver`] the EP registers with its EVDs), the EP's own progress thread
//! for when nobody waits, and the process's watchdog that wakes it.

use crate::ep::rx::End;
use crate::ep::shared::*;
use rmr_api::Status;
use rmr_api::provider::{Driver, Interest, WaitOn};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

impl EpShared {
    /// The watchdog's look at this EP while its progress thread stands back
    /// (`seen`/`same`: the EP's wait count at the last look, and looks since
    /// it changed).
    pub(super) fn watch_look(&self, seen: &mut u64, same: &mut u32) -> Look {
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
    pub(super) fn driven_recently(&self) -> bool {
        self.active.load(Ordering::SeqCst) > 0
            || now_ns().saturating_sub(self.left_at.load(Ordering::SeqCst))
                < LINGER.as_nanos() as u64
    }

    /// Runs the receive side if no other thread does. Returns whether it moved.
    pub(super) fn drive_rx(&self) -> bool {
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
    pub(super) fn progress_thread(self: Arc<Self>) {
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

    /// [`Driver::leave`] at `at` (ns after [`base`]).
    pub(super) fn stamp_left(&self, at: u64) {
        self.left_at.store(at, Ordering::SeqCst);
        if self.active.fetch_sub(1, Ordering::SeqCst) == 1 && self.deep.load(Ordering::SeqCst) {
            self.kick();
        }
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

/// What the watchdog does with an EP it looked at.
pub(super) enum Look {
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
