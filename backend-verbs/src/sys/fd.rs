//! Blocking primitives: an eventfd to wake waiters, an epoll set that turns
//! readable when any member does (an EVD's one [`rmr_api::Evd::wait_fd`]),
//! `poll(2)` with a timeout, and O_NONBLOCK.

use super::last_err;
use rmr_api::Result;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Sets O_NONBLOCK on `fd`.
///
/// # Errors
/// `Error::Backend` from fcntl.
pub(crate) fn set_nonblocking(fd: RawFd) -> Result<()> {
    // SAFETY: fcntl on a caller-owned open fd with integer arguments only.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(last_err("fcntl(O_NONBLOCK)"));
    }
    Ok(())
}

/// A non-blocking eventfd.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// Creates it.
    ///
    /// # Errors
    /// `Error::Backend` from eventfd.
    pub(crate) fn new() -> Result<EventFd> {
        // SAFETY: plain syscall; a non-negative result is a fresh fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(last_err("eventfd"));
        }
        // SAFETY: fd is open and owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes it readable.
    pub(crate) fn notify(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our own fd.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Resets it to unreadable.
    pub(crate) fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64 from our own non-blocking fd.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&raw mut v).cast(), 8) };
    }

    /// The raw fd.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An epoll set (level-triggered, readable interest).
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    /// An epoll fd watching `fds` for input.
    ///
    /// # Errors
    /// `Error::Backend` from epoll_create1/epoll_ctl.
    pub(crate) fn watching(fds: &[RawFd]) -> Result<Epoll> {
        // SAFETY: plain syscall; a non-negative result is a fresh fd we own.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(last_err("epoll_create1"));
        }
        // SAFETY: ep is open and owned by nobody else.
        let e = Epoll(unsafe { OwnedFd::from_raw_fd(ep) });
        for &fd in fds {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
            // SAFETY: ev is a live epoll_event; both fds are open.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(last_err("epoll_ctl"));
            }
        }
        Ok(e)
    }

    /// The raw fd.
    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// The epoll descriptor, borrowed for `poll(2)` by a layer above.
    pub(crate) fn borrow(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }
}

/// Waits until one of `fds` is readable or `timeout` passes (`None`: forever).
/// Returns the readiness of each fd.
pub(crate) fn poll_in(fds: &[RawFd], timeout: Option<Duration>) -> Vec<bool> {
    let mut p: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let ms = match timeout {
        None => -1,
        Some(t) => {
            t.as_millis().min(i32::MAX as u128) as i32
                + i32::from(t.subsec_nanos() % 1_000_000 != 0)
        }
    };
    // SAFETY: p is a live array of p.len() pollfds.
    let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    if n <= 0 {
        return vec![false; fds.len()];
    }
    p.iter().map(|x| x.revents != 0).collect()
}
