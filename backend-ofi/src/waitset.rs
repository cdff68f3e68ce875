//! A CQ's poll set (`FI_WAIT_POLLFD`) as one descriptor to sleep on.
//!
//! Why a poll set: libfabric 1.17's `tcp` provider makes a progress pass
//! on every `fi_cq_read`, and the pass looks at the CQ's wait object with
//! a zero timeout. For an `FI_WAIT_FD` CQ that is `epoll_wait` on an epoll
//! set; for an `FI_WAIT_POLLFD` CQ it is a `poll(2)` of the set, which
//! costs the kernel less: a waiter that spins on the CQ (a ping-pong) gets
//! the next message sooner (BENCHMARKS.md, "The ofi backend's CQs on a
//! poll set"). Its successor (libfabric 1.18's `xnet`) polls a set of its
//! own and never processes the CQ's: the IA asks for a poll set only on
//! libfabric before 1.18, and a CQ whose set does not hold the CQ's own
//! signal after a `fi_trywait` is opened again with an fd.
//!
//! A waiter that sleeps needs the set as one descriptor (the software EVD
//! polls one per driver, beside its own eventfd): a [`PollSet`] keeps an
//! epoll set of its own mirroring libfabric's, brought up to date
//! ([`PollSet::sync`], `FI_GETWAIT`) each time a thread is about to sleep
//! on the CQ, after `fi_trywait` allowed it. Only sleeps use the mirror;
//! the provider's progress passes never see it.
//!
//! Two rules of libfabric 1.17's poll sets (its `util` code; the first
//! still holds in the newest source), which the mirror follows:
//! - The set's first entry is the set's own signal: raised when fds are
//!   queued to be added or removed and when an fd's events change, and
//!   cleared only by a blocking wait inside libfabric, which nothing here
//!   makes. It is left out of the mirror (it would stay readable and wake
//!   every sleep at once). What a sleeper must wake for, the provider
//!   raises on the CQ's wait signal, another entry, which is kept: a
//!   completion, or a transmit that now waits for room in the socket (the
//!   sleeper's next mirror then watches the socket for writing).
//! - Fds queued for adding join the set at the next progress pass (on
//!   `tcp` a `fi_trywait` makes one). A connection's socket is queued before its
//!   endpoint reports `FI_CONNECTED`, and then the backend wakes whoever
//!   sleeps on the endpoint's CQs (`EvdShared::wake_sleepers`): they drive
//!   the CQ once and mirror the set again before they sleep.

use crate::ffi::Cq;
use ofi_sys as sys;
use rmr_api::{Error, Result};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// An epoll set mirroring a CQ's poll set (see the module's docs).
pub(crate) struct PollSet {
    epoll: OwnedFd,
    state: Mutex<State>,
    /// Looks at the set that failed (the sleeper napped instead).
    failed: AtomicU64,
}

struct State {
    /// libfabric's change index when the mirror was last brought up to date.
    change: Option<u64>,
    /// The fds registered, with their events, in the set's order.
    fds: Vec<(RawFd, u32)>,
    /// `FI_GETWAIT`'s copy of the set.
    buf: Vec<sys::pollfd>,
}

impl PollSet {
    /// An empty mirror.
    ///
    /// # Errors
    /// An I/O error when no epoll set can be made (descriptors exhausted).
    pub(crate) fn new() -> Result<PollSet> {
        let epoll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .map_err(|e| Error::io("epoll_create1", e.into()))?;
        Ok(PollSet {
            epoll,
            state: Mutex::new(State { change: None, fds: Vec::new(), buf: Vec::new() }),
            failed: AtomicU64::new(0),
        })
    }

    /// The descriptor to sleep on: readable when a mirrored fd is ready.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Fds mirrored now (the set's own signal left out).
    pub(crate) fn watched(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).fds.len()
    }

    /// Looks at the set that failed so far (each made its caller nap).
    pub(crate) fn failures(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Brings the mirror up to date with `cq`'s poll set; false when the
    /// set cannot be read (the caller naps instead of sleeping on it). The
    /// caller keeps `cq`'s progress passes out meanwhile (see
    /// [`Cq::poll_set`]).
    pub(crate) fn sync(&self, cq: &Cq) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let State { change, fds, buf } = &mut *s;
        let Some(index) = cq.poll_set(buf) else {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        // Entry 0 is the set's own signal (see the module's docs).
        let entries =
            || buf.iter().skip(1).filter(|p| p.fd >= 0).map(|p| (p.fd, u32::from(p.events as u16)));
        // Most looks find the set as the last one left it: no allocation.
        if *change == Some(index) && entries().eq(fds.iter().copied()) {
            return true;
        }
        let now: Vec<(RawFd, u32)> = entries().collect();
        let mut old = fds.clone();
        old.sort_unstable();
        // A new index: fds came or went, and a number may now name another
        // socket than the one registered under it (closed and reused), so
        // every fd is registered afresh. The same index: only events changed.
        let renew = *change != Some(index);
        let mut sorted = now.clone();
        sorted.sort_unstable();
        for &(fd, _) in &old {
            if sorted.binary_search_by_key(&fd, |e| e.0).is_err() {
                let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0);
            }
        }
        for &(fd, ev) in &now {
            let had = old.binary_search_by_key(&fd, |e| e.0).ok().map(|i| old[i].1);
            if renew || had.is_none() {
                let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0);
                let _ = self.ctl(libc::EPOLL_CTL_ADD, fd, ev);
            } else if had != Some(ev)
                && self.ctl(libc::EPOLL_CTL_MOD, fd, ev).is_err_and(|e| e == libc::ENOENT)
            {
                let _ = self.ctl(libc::EPOLL_CTL_ADD, fd, ev);
            }
        }
        *fds = now;
        *change = Some(index);
        true
    }

    /// `epoll_ctl` on the mirror: `Err(errno)` on failure (an fd closed
    /// meanwhile is one; it leaves the set by itself).
    fn ctl(&self, op: i32, fd: RawFd, events: u32) -> std::result::Result<(), i32> {
        use std::os::fd::AsRawFd;
        let mut ev = libc::epoll_event { events, u64: fd as u64 };
        // SAFETY: epoll_ctl takes plain descriptor numbers and a pointer to
        // a live local; a number that names nothing yields an error.
        let ret = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) };
        if ret == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    }
}
