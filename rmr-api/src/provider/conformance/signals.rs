//! Signals for the conformance case that interrupts a thread's blocking
//! calls ([`super::cases::signals_interrupt_neither_connect_nor_wait`]).

use std::sync::Once;

/// The calling thread, as [`interrupt`] names it.
pub(crate) fn this_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

extern "C" fn nothing(_: libc::c_int) {}

/// Sends `SIGUSR1` to `thread`, after installing (once per process) a
/// handler that does nothing, without `SA_RESTART`: a blocking call of
/// that thread returns `EINTR`.
///
/// # Safety
/// `thread` must be a thread of this process that has not been joined
/// (or detached and ended): its id is only valid until then.
pub(crate) unsafe fn interrupt(thread: libc::pthread_t) {
    static HANDLER: Once = Once::new();
    HANDLER.call_once(|| {
        // SAFETY: `sa` is a zeroed sigaction filled in before use; the
        // handler does nothing, so it is async-signal-safe; SIGUSR1 is
        // not used elsewhere in the library or its tests.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = nothing as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut())
        };
        assert_eq!(r, 0, "sigaction");
    });
    // SAFETY: the caller's contract: `thread` has not been joined.
    let r = unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
    assert_eq!(r, 0, "pthread_kill");
}
