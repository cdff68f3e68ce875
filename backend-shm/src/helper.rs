//! The IA's progress helper: one thread, started with the first
//! connection, that drives the endpoints no application thread drives
//! (RDMA into a passive target, answers to reads and atomics, frames
//! waiting for ring space) and learns when a peer's set-up socket hangs up.
//!
//! It stands back from an endpoint while an application thread drives it
//! (looking every `watch`, the IA's [`ShmConfig::watch`](crate::ShmConfig::watch),
//! whether it has left; more often for a while after a takeover, see
//! `rmr_api::provider::Handover`) and otherwise
//! sleeps in `epoll` on the endpoints' doorbells, armed as a sleeping
//! waiter arms them: the peer rings only a doorbell someone sleeps on.

use rmr_api::provider::clock::helper_grain;
use rustix::buffer::spare_capacity;
use rustix::event::{EventfdFlags, epoll, eventfd};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The helper's quick look period, soon after it took an endpoint over
/// (see `rmr_api::provider::Handover`); the helper's timers wait in whole
/// milliseconds (`rmr_api::provider::clock::helper_grain`), so a look comes
/// about 1 ms later.
pub(crate) const QUICK: Duration = Duration::from_micros(200);

/// How often the helper looks at an endpoint whose message waits for a
/// receive or whose frames wait for ring space, at most.
const RETRY: Duration = Duration::from_millis(2);

/// The `epoll` datum of the helper's own wake-up.
const WAKE: u64 = u64::MAX;

struct Inner {
    watch: Duration,
    epoll: OwnedFd,
    wake: OwnedFd,
    new: Mutex<Vec<Arc<dyn Tended>>>,
    stop: AtomicBool,
}

/// An IA's helper (its thread runs from the first connection on).
pub(crate) struct Helper {
    watch: Duration,
    inner: Mutex<Option<Arc<Inner>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Helper {
    /// A helper that looks every `watch` at endpoints threads drive.
    pub(crate) fn new(watch: Duration) -> Helper {
        Helper { watch, inner: Mutex::new(None), thread: Mutex::new(None) }
    }

    /// Takes `ep` into the helper's care, starting the thread if needed.
    pub(crate) fn register(&self, ep: Arc<dyn Tended>) -> std::io::Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
            let wake = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
            epoll::add(&epoll, &wake, epoll::EventData::new_u64(WAKE), epoll::EventFlags::IN)?;
            let inner = Arc::new(Inner {
                watch: self.watch,
                epoll,
                wake,
                new: Mutex::new(Vec::new()),
                stop: AtomicBool::new(false),
            });
            let i2 = inner.clone();
            let t = std::thread::Builder::new().name("rmr-shm-helper".into()).spawn(move || {
                // Its work comes in bursts of microseconds, often on a
                // CPU an application thread computes on.
                rmr_api::provider::short_slices();
                run(&i2)
            })?;
            *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
            *g = Some(inner);
        }
        let inner = g.as_ref().expect("started");
        inner.new.lock().unwrap_or_else(|e| e.into_inner()).push(ep);
        let _ = rustix::io::write(&inner.wake, &1u64.to_ne_bytes());
        Ok(())
    }

    /// Wakes the helper to look at every endpoint now.
    pub(crate) fn kick(&self) {
        if let Some(i) = self.inner.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = rustix::io::write(&i.wake, &1u64.to_ne_bytes());
        }
    }

    /// Ends the thread (the IA is gone) and waits for it, unless this is
    /// the helper itself (it dropped the IA's last endpoint).
    pub(crate) fn stop(&self) {
        if let Some(i) = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take() {
            i.stop.store(true, Ordering::Release);
            let _ = rustix::io::write(&i.wake, &1u64.to_ne_bytes());
        }
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// What the helper does next about one endpoint.
pub(crate) enum Look {
    /// Asleep on its doorbell (re-armed in the helper's set).
    Armed,
    /// An application thread drives it, or a timer runs: look again soon.
    Watch,
    /// Soon after the helper took it over (its threads are back, or a
    /// message waits for a receive): look again in [`QUICK`].
    Soon,
    /// A message waits for a receive, or frames for ring space, and
    /// nobody drives it: look again within [`RETRY`] (or `watch`, if
    /// shorter).
    Retry,
    /// Work is ready: look again at once.
    Again,
    /// The connection ended: forget it.
    Gone,
}

/// An endpoint as the helper sees it.
pub(crate) trait Tended: Send + Sync {
    /// A number unique among the IA's endpoints.
    fn key(&self) -> u64;
    /// The doorbell the peer rings.
    fn doorbell(&self) -> BorrowedFd<'_>;
    /// The set-up socket, which hangs up when the peer is gone.
    fn socket(&self) -> BorrowedFd<'_>;
    /// Drives the endpoint unless an application thread does, and says
    /// what next (arming its doorbell for [`Look::Armed`]).
    fn look(&self) -> Look;
    /// The set-up socket hung up.
    fn hung_up(&self);
}

fn run(inner: &Inner) {
    let mut eps: Vec<Arc<dyn Tended>> = Vec::new();
    let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
    loop {
        if inner.stop.load(Ordering::Acquire) {
            // The IA is gone; endpoints still in care end with it.
            return;
        }
        for ep in inner.new.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            {
                let id = ep.key() << 1;
                let _ = epoll::add(
                    &inner.epoll,
                    ep.doorbell(),
                    epoll::EventData::new_u64(id),
                    epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
                );
                let _ = epoll::add(
                    &inner.epoll,
                    ep.socket(),
                    epoll::EventData::new_u64(id | 1),
                    epoll::EventFlags::RDHUP,
                );
                eps.push(ep);
            }
        }
        let (mut watch, mut soon, mut retry, mut again) = (false, false, false, false);
        eps.retain(|ep| match ep.look() {
            Look::Armed => {
                // One-shot: the doorbell is the helper's only while armed;
                // an application thread that drives the EP drains it.
                let _ = epoll::modify(
                    &inner.epoll,
                    ep.doorbell(),
                    epoll::EventData::new_u64(ep.key() << 1),
                    epoll::EventFlags::IN | epoll::EventFlags::ONESHOT,
                );
                true
            }
            Look::Watch => {
                watch = true;
                true
            }
            Look::Soon => {
                soon = true;
                true
            }
            Look::Retry => {
                retry = true;
                true
            }
            Look::Again => {
                again = true;
                true
            }
            Look::Gone => {
                let _ = epoll::delete(&inner.epoll, ep.doorbell());
                let _ = epoll::delete(&inner.epoll, ep.socket());
                false
            }
        });
        let timeout = if again {
            Some(Duration::ZERO)
        } else if soon {
            Some(QUICK)
        } else if retry {
            Some(RETRY.min(inner.watch))
        } else if watch {
            Some(inner.watch)
        } else {
            None
        };
        // Whole milliseconds, as the tcp helper's (`helper_grain`).
        let ts = timeout.map(helper_grain).map(|t| rustix::time::Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        events.clear();
        if epoll::wait(&inner.epoll, spare_capacity(&mut events), ts.as_ref()).is_err() {
            continue;
        }
        for ev in &events {
            let d = ev.data.u64();
            if d == WAKE {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&inner.wake, &mut b);
                continue;
            }
            // A doorbell: the next round's look drives the EP (and drains it).
            if d & 1 == 1 {
                if let Some(ep) = eps.iter().find(|e| e.key() == d >> 1) {
                    ep.hung_up();
                }
            }
        }
    }
}
