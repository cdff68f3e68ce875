//! Event dispatchers: the [`Evd`] trait applications wait on.
//!
//! Every backend's EVD implements it; the software queue most of them are
//! built on (`provider::SoftEvd`) and its progress machinery live in the
//! provider toolkit, above this module.
//!
//! ## Progress by the waiter
//! A thread waiting on an EVD makes the progress its events need: on the
//! TCP backend it reads and writes the endpoints' sockets itself, so a
//! completion reaches the waiter with no hand-off between threads, as a
//! raw TCP ping-pong does. [`Evd::progress_until`] is the same wait for a
//! condition that raises no event (a flag an RDMA write sets in memory).

use crate::error::{Error, Result};
use crate::event::{DtoCompletion, Event};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::any::Any;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// An event dispatcher (uDAPL's EVD): a queue of [`Event`]s.
pub trait Evd: Send + Sync {
    /// Waits until at least `threshold` events are queued (1 if 0), then
    /// dequeues the oldest one. `None` waits forever. A zero timeout polls:
    /// where the caller's thread makes the progress (the tcp, shm and ofi
    /// backends' EVDs, and multirail's and the bridge's over tcp or shm),
    /// it still looks once, without blocking, at the endpoints reporting
    /// here and drives those with something to do, so a loop that computes
    /// and polls now and then answers the RDMA reads and atomics peers aim
    /// at this process meanwhile.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`] when the threshold was not reached in time (no
    /// event is lost: they stay queued).
    fn wait(&self, timeout: Option<Duration>, threshold: usize) -> Result<Event>;
    /// Dequeues the oldest event without blocking (making whatever progress
    /// is ready first, for backends whose progress is the caller's).
    fn dequeue(&self) -> Option<Event>;
    /// Number of queued events.
    fn len(&self) -> usize;
    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Posts a software event carrying `value`.
    ///
    /// # Errors
    /// [`crate::Error::QueueFull`] when the EVD is at capacity.
    fn post_software(&self, value: u64) -> Result<()>;
    /// A file descriptor that turns readable when this EVD may have events to
    /// dequeue (or progress to make through [`Evd::dequeue`]): how a layer
    /// above (multirail, a bridge) blocks on EVDs of different backends at
    /// once with `poll(2)`. The protocol is libfabric's `fi_trywait`: call
    /// [`Evd::arm`]; if it returns true, block in `poll` on the fd; then
    /// dequeue until `None`. `None` (the default) means the EVD has no such
    /// fd and the caller must poll it with short sleeps.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Prepares [`Evd::wait_fd`] for blocking: returns false when events
    /// are (or may be) ready now, so the caller must dequeue instead of
    /// blocking. The default, for EVDs without a wait fd, is false.
    fn arm(&self) -> bool {
        false
    }
    /// Makes progress until `ready()` holds or an event is queued, for at
    /// most `timeout` (`None`: no limit), and returns whether one of the two
    /// holds. This is the wait for a condition that raises no event, such as
    /// a flag a peer RDMA-writes into memory: on backends whose progress is
    /// the waiter's (TCP), the write lands in this thread's own context.
    /// `spin` bounds how long the wait busy-polls before it blocks (`None`:
    /// the EVD's own setting; zero blocks at once, as a process sharing its
    /// core with peers should). No event is dequeued: call
    /// [`Evd::dequeue`] afterwards.
    ///
    /// The default, for EVDs whose progress happens in [`Evd::dequeue`] or
    /// on the device, blocks on [`Evd::wait_fd`] when the EVD has one and
    /// otherwise spins, yields, then naps up to 256 µs at a time.
    fn progress_until(
        &self,
        timeout: Option<Duration>,
        spin: Option<Duration>,
        ready: &dyn Fn() -> bool,
    ) -> bool {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let spin = spin.unwrap_or(Duration::from_micros(50));
        let mut naps = 0u32;
        loop {
            if ready() || !self.is_empty() {
                return true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            if now - start < spin {
                std::hint::spin_loop();
                continue;
            }
            // At most 1 ms per block: `ready` may turn true without an event.
            let slice = deadline.map_or(Duration::from_millis(1), |d| {
                d.saturating_duration_since(now).min(Duration::from_millis(1))
            });
            // An armed wait fd is slept on; one that cannot be armed (events
            // or progress pending that `ready` does not see) falls back to
            // the yield-then-nap loop below rather than spinning on `arm`.
            if let Some(fd) = self.wait_fd().filter(|_| self.arm()) {
                let _ = poll_readable(fd, slice);
                continue;
            }
            if naps < 64 {
                std::thread::yield_now();
            } else {
                let k = (naps - 64).min(8);
                std::thread::sleep(Duration::from_micros(1 << k).min(slice));
            }
            naps = naps.saturating_add(1);
        }
    }
    /// Downcasting support for backends.
    fn as_any(&self) -> &dyn Any;
}

impl dyn Evd {
    /// Waits up to `timeout` for the next DTO completion and returns it
    /// when it succeeded: the wait a simple program makes after each post.
    /// Connection events that say nothing about the DTOs ([`Event::Established`],
    /// software events, asynchronous notices) are passed over; a connection
    /// that ends first is an error, so the wait never outlives its endpoint.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`]; [`crate::Error::Dto`] for a failed
    /// completion; [`crate::Error::Broken`] or [`crate::Error::NotConnected`]
    /// when a [`Event::Broken`] or [`Event::Disconnected`] comes first.
    ///
    /// # Example
    /// ```no_run
    /// # fn f(evd: &std::sync::Arc<dyn rmr_api::Evd>) -> rmr_api::Result<()> {
    /// let c = evd.wait_dto(std::time::Duration::from_secs(5))?;
    /// println!("{:?} of {} bytes done (cookie {})", c.op, c.bytes, c.cookie);
    /// # Ok(()) }
    /// ```
    pub fn wait_dto(&self, timeout: Duration) -> Result<DtoCompletion> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.wait(Some(left), 1)? {
                Event::Dto(c) => return c.result().map(|()| c),
                Event::Broken { reason, .. } => return Err(Error::Broken(reason)),
                Event::Disconnected { .. } => return Err(Error::NotConnected),
                _ => {}
            }
        }
    }

    /// Waits up to `timeout` until an endpoint reporting here is
    /// disconnected or broken, passing over every other event: how a
    /// server stays until its client has closed (by then the client holds
    /// everything the server sent).
    ///
    /// # Errors
    /// [`crate::Error::Timeout`].
    pub fn wait_closed(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Event::Disconnected { .. } | Event::Broken { .. } = self.wait(Some(left), 1)? {
                return Ok(());
            }
        }
    }
}

/// Blocks until `fd` is readable or `timeout` passes; true when readable
/// (`provider::io::poll_readable`, for the waits above).
///
/// # Errors
/// The OS error of `poll(2)` (`EINTR` counts as "not readable yet").
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    match poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
