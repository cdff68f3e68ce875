//! An EVD with many drivers (an HPC process's one completion queue for
//! all its peers; its own, or those of the EVDs it drives through): its
//! waiters find the drivers with input through an
//! `epoll` set over their sockets and drive only those, so a wait costs
//! what is ready, not what is connected. With a few drivers, one `poll(2)`
//! over all of them is cheaper (no set to keep) and their timers are the
//! waiter's; in this mode a driver's timers are its backend's helper's
//! (the TCP backend's per-IA engine), and the waiter enters a driver only
//! for the moment it drives it.

use super::{POLLERS, SoftEvd};
use crate::provider::Driver;
use crate::provider::cpus::cpus_idle;
use rustix::buffer::spare_capacity;
use rustix::event::{Timespec, epoll};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// From this many drivers on, an EVD's waiters use its `epoll` set.
pub(super) const MANY: usize = 32;

/// How many recently moved drivers a wait flushes.
const RECENT: usize = 4;

/// The set's datum of the EVD's own wake-up eventfd.
const WAKE: u64 = u64::MAX;

/// The `epoll` set of an EVD's drivers, by key (the driver's address).
pub(super) struct Many {
    epfd: OwnedFd,
    keys: Mutex<ManyKeys>,
}

#[derive(Default)]
struct ManyKeys {
    /// The drivers that moved in the last waits (a few): each wait first
    /// flushes them, as a waiter with few drivers drives them all — a
    /// frame such a driver holds for batching (posted after its last
    /// drive, as a reply is) goes out with the next wait, not when the
    /// backend's timer finds it.
    recent: SmallVec<[Weak<dyn Driver>; RECENT]>,
    drivers: HashMap<u64, Weak<dyn Driver>>,
    /// Reported readable but found nothing to do (a receive side waiting
    /// for a posted receive, or busy in another thread): out of the set
    /// until the EVD is woken (a push, a new receive), so that a waiter
    /// does not spin on them.
    parked: Vec<u64>,
}

fn key(d: &dyn Driver) -> u64 {
    d as *const dyn Driver as *const () as usize as u64
}

impl Many {
    /// A set holding `efd` (the EVD's wake-up descriptor).
    pub(super) fn new(efd: std::os::fd::BorrowedFd<'_>) -> Option<Many> {
        let epfd = epoll::create(epoll::CreateFlags::CLOEXEC).ok()?;
        epoll::add(&epfd, efd, epoll::EventData::new_u64(WAKE), epoll::EventFlags::IN).ok()?;
        Some(Many { epfd, keys: Mutex::default() })
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, ManyKeys> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a driver with a stable descriptor; false when it has none (or
    /// the set refused it).
    pub(super) fn add(&self, d: &Arc<dyn Driver>) -> bool {
        let Some(fd) = d.stable_fd() else { return false };
        let k = key(&**d);
        if self.keys().drivers.contains_key(&k) {
            return true; // reports to several of the EVDs driven
        }
        let ev = epoll::EventData::new_u64(k);
        if epoll::add(&self.epfd, fd, ev, epoll::EventFlags::IN).is_err() {
            return false;
        }
        self.keys().drivers.insert(k, Arc::downgrade(d));
        true
    }

    pub(super) fn remove(&self, d: &dyn Driver) {
        let k = key(d);
        let mut keys = self.keys();
        if keys.drivers.remove(&k).is_some() {
            if let Some(fd) = d.stable_fd() {
                let _ = epoll::delete(&self.epfd, fd);
            }
        }
        keys.parked.retain(|p| *p != k);
    }

    fn park(&self, d: &Arc<dyn Driver>) {
        let Some(fd) = d.stable_fd() else { return };
        let k = key(&**d);
        let ev = epoll::EventData::new_u64(k);
        if epoll::modify(&self.epfd, fd, ev, epoll::EventFlags::empty()).is_ok() {
            self.keys().parked.push(k);
        }
    }

    /// Flushes the recently moved drivers.
    fn flush_recent(&self) {
        let recent: SmallVec<[Arc<dyn Driver>; RECENT]> =
            self.keys().recent.iter().filter_map(Weak::upgrade).collect();
        for d in recent {
            d.flush();
        }
    }

    /// Remembers that `d` moved (for [`Many::flush_recent`]).
    fn moved(&self, d: &Arc<dyn Driver>) {
        let mut keys = self.keys();
        let r = &mut keys.recent;
        if r.first().is_some_and(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(d))) {
            return;
        }
        r.retain(|w| !std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(d)));
        if r.len() == RECENT {
            r.pop();
        }
        r.insert(0, Arc::downgrade(d));
    }

    fn unpark(&self) {
        let mut keys = self.keys();
        if keys.parked.is_empty() {
            return;
        }
        let parked = std::mem::take(&mut keys.parked);
        for k in parked {
            let Some(d) = keys.drivers.get(&k).and_then(Weak::upgrade) else { continue };
            if let Some(fd) = d.stable_fd() {
                let ev = epoll::EventData::new_u64(k);
                let _ = epoll::modify(&self.epfd, fd, ev, epoll::EventFlags::IN);
            }
        }
    }

    /// One look (`timeout` zero) or wait in the set: the drivers with
    /// input, and whether the EVD was woken.
    fn ready(&self, timeout: Option<Duration>, out: &mut SmallVec<[Arc<dyn Driver>; 8]>) -> bool {
        let mut evs: Vec<epoll::Event> = Vec::with_capacity(64);
        let ts =
            timeout.map(|l| Timespec { tv_sec: l.as_secs() as _, tv_nsec: l.subsec_nanos() as _ });
        let _ = epoll::wait(&self.epfd, spare_capacity(&mut evs), ts.as_ref());
        let mut woke = false;
        if evs.is_empty() {
            return false;
        }
        let keys = self.keys();
        for ev in &evs {
            match ev.data.u64() {
                WAKE => woke = true,
                k => {
                    if let Some(d) = keys.drivers.get(&k).and_then(Weak::upgrade) {
                        out.push(d);
                    }
                }
            }
        }
        woke
    }
}

impl SoftEvd {
    /// The EVD's set, when its waiters use one (see the module docs).
    pub(super) fn many(&self) -> Option<&Many> {
        if !self.many_on.load(Ordering::Acquire) {
            return None;
        }
        self.many.get().and_then(Option::as_ref)
    }

    /// [`SoftEvd::block_until`] through the set.
    pub(super) fn many_block_until(
        &self,
        m: &Many,
        deadline: Option<Instant>,
        spin: Duration,
        done: &dyn Fn() -> bool,
    ) -> bool {
        let spin = if spin.is_zero() || cpus_idle() { spin } else { Duration::ZERO };
        let start = Instant::now();
        let mut go: SmallVec<[Arc<dyn Driver>; 8]> = SmallVec::new();
        m.flush_recent();
        // Whether the set was looked at in this wait.
        let mut looked = false;
        loop {
            if done() {
                return true;
            }
            // Drive what is ready, again while it moves (level-triggered: a
            // driver left with input is reported again).
            let mut moved = false;
            for d in go.drain(..) {
                d.enter();
                let m_ = d.drive();
                d.leave();
                moved |= m_;
                if m_ {
                    m.moved(&d);
                }
                // Readable, yet nothing moved and it wants no input (a
                // receive side waiting for a posted receive): parked, or a
                // waiter would spin on it. (Nothing moved because another
                // thread was reading it: it stays.)
                if !m_ && d.wait_on().fd.is_none_or(|(_, i)| !i.read) {
                    m.park(&d);
                }
                if m_ && done() {
                    return true;
                }
            }
            if moved || !looked && deadline.is_some_and(|d| Instant::now() >= d) {
                // Look again at once (zero timeout) before any sleep; a
                // wait that ends before its first look (a zero timeout)
                // still looks once, as a poll of the EVD promises.
                looked = true;
                let woke = m.ready(Some(Duration::ZERO), &mut go);
                if woke {
                    self.drain_efd();
                    m.unpark();
                }
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            let spinning = now.duration_since(start) < spin;
            let timeout = if spinning {
                std::thread::yield_now();
                Some(Duration::ZERO)
            } else {
                m.flush_recent();
                POLLERS.fetch_add(1, Ordering::SeqCst);
                self.poll_waiters.fetch_add(1, Ordering::SeqCst);
                if done() {
                    self.poll_waiters.fetch_sub(1, Ordering::SeqCst);
                    POLLERS.fetch_sub(1, Ordering::SeqCst);
                    return true;
                }
                deadline.map(|d| d.saturating_duration_since(now))
            };
            looked = true;
            let woke = m.ready(timeout, &mut go);
            if !spinning {
                self.poll_waiters.fetch_sub(1, Ordering::SeqCst);
                POLLERS.fetch_sub(1, Ordering::SeqCst);
            }
            if woke {
                self.drain_efd();
                m.unpark();
            }
        }
    }

    fn drain_efd(&self) {
        if let Some(e) = self.efd() {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(e, &mut b);
            // Another waiter asleep on the same descriptor must not miss
            // the events this one will not take: ring it again.
            if self.queued.load(Ordering::SeqCst) > 0 {
                self.wake_pollers();
            }
        }
    }

    /// [`SoftEvd::drive_once`] through the set: a zero-timeout look, and a
    /// drive of what it found.
    pub(super) fn many_drive_once(&self, m: &Many) -> bool {
        let mut go: SmallVec<[Arc<dyn Driver>; 8]> = SmallVec::new();
        if m.ready(Some(Duration::ZERO), &mut go) {
            self.drain_efd();
            m.unpark();
        }
        let mut moved = false;
        for d in go {
            d.enter();
            moved |= d.drive();
            d.leave();
        }
        moved
    }
}
