//! Progress a waiting thread makes itself: the [`Driver`] a backend
//! registers with its EVDs, where a driver blocks ([`WaitOn`],
//! [`Interest`]), and doorbells a poster may defer.

use std::os::fd::BorrowedFd;
use std::time::Instant;

/// What a [`Driver`] waits for on its file descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Wake when readable.
    pub read: bool,
    /// Wake when writable.
    pub write: bool,
}

/// Where a [`Driver`] can block: a descriptor with an [`Interest`], and a
/// deadline by which [`Driver::drive`] must run again (a timer of the
/// backend's, such as a receiver-not-ready timeout).
pub struct WaitOn<'a> {
    /// The descriptor, or `None` when only the deadline (or another thread) can help.
    pub fd: Option<(BorrowedFd<'a>, Interest)>,
    /// When to drive again at the latest.
    pub deadline: Option<Instant>,
}

/// Progress that a thread waiting on an EVD can make itself: a backend's
/// endpoint whose IO is non-blocking socket reads and writes. Registered
/// with [`SoftEvd::add_driver`](crate::provider::SoftEvd::add_driver).
pub trait Driver: Send + Sync {
    /// Does all IO that is ready now, without blocking; events it produces
    /// are pushed to their EVDs. Returns true when anything moved.
    fn drive(&self) -> bool;
    /// Where to block when [`Driver::drive`] had nothing to do.
    fn wait_on(&self) -> WaitOn<'_>;
    /// Where to *look* (a zero-timeout `poll`) while a waiter spins, to tell
    /// which drivers have input. Default: [`Driver::wait_on`]. A driver
    /// whose [`Driver::drive`] is itself the cheapest look (a completion
    /// queue read), or whose `wait_on` has a cost that only a sleep needs
    /// (libfabric's `fi_trywait`), returns no descriptor and a deadline of
    /// now: "drive me again".
    fn look_on(&self) -> WaitOn<'_> {
        self.wait_on()
    }
    /// A thread starts driving (waiting on an EVD this driver reports to):
    /// the backend's own progress thread may stand back.
    fn enter(&self) {}
    /// That thread stops driving.
    fn leave(&self) {}
    /// Nobody will drive this driver for a while (an event loop arms the
    /// EVD and sleeps on its descriptor): the backend's own progress takes
    /// over now. Default: nothing.
    fn release(&self) {}
    /// [`Driver::leave`] at `now`, read once by a waiter that leaves several
    /// drivers (a backend that stamps the time of leaving needs no clock
    /// read of its own). Default: [`Driver::leave`].
    fn leave_at(&self, now: Instant) {
        let _ = now;
        self.leave();
    }
    /// The descriptor this driver's input arrives on for as long as it is
    /// registered (a connected socket), if it has one: an EVD with many
    /// drivers keeps them in an `epoll` set by it and drives only those
    /// with input. Default: none (every wait drives it).
    fn stable_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// How many times a spinning waiter may look at [`Driver::has_input`]
    /// in a tight loop before it yields the CPU (default 0: never; every
    /// spin step yields). For a driver whose input shows in shared memory
    /// (a ring), where one look is a load and a yield a system call.
    fn spin_looks(&self) -> u32 {
        0
    }
    /// Whether input waits (one cheap look, no IO), for waiters that spin
    /// on [`Driver::spin_looks`]. Default: false.
    fn has_input(&self) -> bool {
        false
    }
    /// Sends what waits to go out (frames held for batching, frames queued
    /// behind a full socket) without reading or blocking; true when any
    /// went. See [`SoftEvd::flush_writes`](crate::provider::SoftEvd::flush_writes). Default: nothing to flush.
    fn flush(&self) -> bool {
        false
    }
}

thread_local! {
    static DOORBELL_DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's doorbells deferred: a backend that holds
/// small frames for batching (TCP) does not wake other threads to send
/// what `f` posts — the caller rings the doorbell itself, with
/// [`SoftEvd::flush_writes`](crate::provider::SoftEvd::flush_writes) on the EVDs of the endpoints it posted to,
/// before it blocks. For a forwarder that posts on endpoints whose EVD
/// another thread waits on: each post would otherwise wake that thread
/// for nothing (the poster sends the batch a moment later anyway).
pub fn with_deferred_doorbell<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            DOORBELL_DEFERRED.with(|d| d.set(self.0));
        }
    }
    let _r = Reset(DOORBELL_DEFERRED.with(|d| d.replace(true)));
    f()
}

/// True inside [`with_deferred_doorbell`] (backends consult it).
pub fn doorbell_deferred() -> bool {
    DOORBELL_DEFERRED.with(|d| d.get())
}
