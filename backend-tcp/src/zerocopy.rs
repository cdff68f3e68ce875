//! Zero-copy sends ([`crate::TcpConfig::zerocopy`]): the payload of a
//! large DTO frame goes to the socket with `MSG_ZEROCOPY`, so that the
//! kernel takes the bytes from the registered memory itself. It reads them
//! until it says it is done (a notice on the socket's error queue, per
//! `sendmsg` call, numbered from 0), so the DTO completes only once that
//! notice came, as well as the peer's acknowledgement: the user may reuse
//! a completed DTO's memory. The frame's regions are kept until then too.
//! The frame's header goes in a plain send before its payload (its buffer
//! is the queue's to reuse); the payload's last call ends its record
//! (`MSG_EOR`), so that nothing sent later shares its buffers and its
//! notice waits only for its own bytes' acknowledgement: the notices of
//! the frames before a response come with the acknowledgement the
//! response's segment carries, or as the NIC finishes sending them.

use rmr_api::MemRegion;
use rmr_api::provider::io::{ZerocopyDone, zerocopy_done};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The regions a call's pages lie in, kept while the kernel reads them.
pub(crate) type Keep = SmallVec<[Arc<MemRegion>; 2]>;

/// One zero-copy `sendmsg` that sent bytes, and the request frame it
/// carried part of.
struct Call {
    id: u32,
    seq: u64,
    done: bool,
    /// The frame's regions, kept while the kernel reads them.
    _keep: Keep,
}

#[derive(Default)]
struct State {
    /// The number the kernel gives the next call.
    next: u32,
    /// Calls in order; the front ones go once done.
    calls: VecDeque<Call>,
    /// A call under way, for this request frame.
    sending: Option<u64>,
    /// The kernel's notice for the call under way came before the call
    /// returned (it numbers the call as it takes it).
    sending_done: bool,
    notices: Vec<ZerocopyDone>,
}

/// An endpoint's zero-copy sends.
pub(crate) struct Zc {
    min: u64,
    st: Mutex<State>,
    /// Calls wait for the kernel's notice (read without the lock).
    busy: AtomicBool,
    /// Calls made, and notices that said the kernel copied after all.
    calls: AtomicU64,
    copied: AtomicU64,
    /// Calls the kernel refused (`ENOBUFS`), sent copied instead.
    refused: AtomicU64,
    /// A call was done as it returned (see [`Zc::take_early`]).
    early: AtomicBool,
}

impl Zc {
    /// Zero-copy sends for payloads of at least `min` bytes (on a socket
    /// that accepted `SO_ZEROCOPY`).
    pub(crate) fn new(min: u64) -> Zc {
        Zc {
            min,
            st: Mutex::new(State::default()),
            busy: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            early: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a DTO frame with `payload` bytes goes zero-copy.
    pub(crate) fn wants(&self, payload: u64) -> bool {
        payload >= self.min
    }

    /// A zero-copy call for request frame `seq` is about to be made: no
    /// completion goes past the frame before its end (the peer may
    /// acknowledge the frame before [`Zc::end`] records the call).
    pub(crate) fn begin(&self, seq: u64) {
        let mut st = self.lock();
        st.sending = Some(seq);
        self.busy.store(true, Ordering::SeqCst);
    }

    /// The call [`Zc::begin`] announced returned; `sent`: it sent bytes
    /// (the kernel numbered it), so the frame's regions are kept until the
    /// kernel is done with them.
    pub(crate) fn end(&self, sent: bool, keep: impl FnOnce() -> Keep) {
        let mut st = self.lock();
        let seq = st.sending.take().expect("begin before end");
        let done = std::mem::take(&mut st.sending_done);
        // A call that sent nothing got no number, so no notice.
        debug_assert!(sent || !done, "a notice for a call that sent nothing");
        if sent {
            let id = st.next;
            st.next = id.wrapping_add(1);
            st.calls.push_back(Call { id, seq, done, _keep: keep() });
            self.calls.fetch_add(1, Ordering::Relaxed);
            if done {
                self.early.store(true, Ordering::SeqCst);
            }
        }
        self.busy.store(!st.calls.is_empty(), Ordering::SeqCst);
    }

    /// Whether a call was done by the time it returned: no notice is left
    /// to wake a driver for its frame's completion, so the poster lets it
    /// go (the next [`Zc::gate`] or [`Zc::reap`] drops the call).
    pub(crate) fn take_early(&self) -> bool {
        self.early.load(Ordering::Relaxed) && self.early.swap(false, Ordering::SeqCst)
    }

    /// The kernel refused a call with `ENOBUFS` (no room for its notice
    /// within `optmem_max`, or pages beyond the locked-memory limit,
    /// `RLIMIT_MEMLOCK`): the caller copies instead.
    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the kernel may still read pages of calls not yet done, once
    /// the notices waiting on `fd` are read (a stream that ends or is
    /// dropped then is aborted: see `Tx`'s drop).
    pub(crate) fn holds(&self, fd: BorrowedFd<'_>) -> bool {
        let _ = self.reap(fd);
        let mut st = self.lock();
        while st.calls.front().is_some_and(|c| c.done) {
            st.calls.pop_front();
        }
        st.calls.iter().any(|c| !c.done)
    }

    /// Whether calls wait for the kernel's notice.
    pub(crate) fn busy(&self) -> bool {
        self.busy.load(Ordering::SeqCst)
    }

    /// Reads the kernel's notices on `fd`. Returns whether a call was
    /// released (completions may now go further).
    ///
    /// # Errors
    /// The error queue could not be read.
    pub(crate) fn reap(&self, fd: BorrowedFd<'_>) -> io::Result<bool> {
        let mut st = self.lock();
        let mut notices = std::mem::take(&mut st.notices);
        notices.clear();
        let r = zerocopy_done(fd, &mut notices);
        let released = self.apply(&mut st, &notices);
        st.notices = notices;
        r.map(|_| released)
    }

    /// Marks the calls `notices` cover done and lets go of the done ones
    /// at the front. Returns whether any went.
    fn apply(&self, st: &mut State, notices: &[ZerocopyDone]) -> bool {
        for n in notices {
            if n.copied {
                self.copied
                    .fetch_add(u64::from(n.last.wrapping_sub(n.first)) + 1, Ordering::Relaxed);
            }
            for c in st.calls.iter_mut().filter(|c| n.covers(c.id)) {
                c.done = true;
            }
            if st.sending.is_some() && n.covers(st.next) {
                st.sending_done = true;
            }
        }
        let mut released = false;
        while st.calls.front().is_some_and(|c| c.done) {
            st.calls.pop_front();
            released = true;
        }
        self.busy.store(!st.calls.is_empty() || st.sending.is_some(), Ordering::SeqCst);
        released
    }

    /// The last request whose completion may be reported, given the
    /// peer's acknowledgement `ack`: the ones before the first frame whose
    /// pages the kernel still reads.
    pub(crate) fn gate(&self, ack: u64) -> u64 {
        if !self.busy() {
            return ack;
        }
        let mut st = self.lock();
        // Calls done as they returned (see `take_early`) go here too.
        while st.calls.front().is_some_and(|c| c.done) {
            st.calls.pop_front();
        }
        self.busy.store(!st.calls.is_empty() || st.sending.is_some(), Ordering::SeqCst);
        let first = st.calls.front().map(|c| c.seq).into_iter().chain(st.sending).min();
        match first {
            Some(seq) => ack.min(seq.saturating_sub(1)),
            None => ack,
        }
    }

    /// For the EP's `zerocopy` note. The kernel merges the notices of
    /// neighbouring calls and keeps the first one's "copied" mark, so the
    /// copied count is approximate.
    pub(crate) fn note(&self) -> String {
        let waiting = self.lock().calls.len();
        format!(
            "on (payloads >= {} B): {} sends, {} copied by the kernel, {} copied when it refused, {} waiting",
            self.min,
            self.calls.load(Ordering::Relaxed),
            self.copied.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            waiting
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_stop_before_the_first_frame_the_kernel_still_reads() {
        let z = Zc::new(1);
        assert_eq!(z.gate(10), 10, "nothing sent zero-copy");
        z.begin(3);
        assert_eq!(z.gate(10), 2, "a call under way holds its frame back");
        z.end(true, Keep::new);
        z.begin(3);
        z.end(true, Keep::new);
        z.begin(5);
        z.end(true, Keep::new);
        z.begin(6);
        z.end(false, Keep::new);
        assert_eq!(z.gate(10), 2);
        // The kernel says it is done with calls 1..=2 (frame 3's second
        // call and frame 5): frame 3's first call still holds them up.
        let mut st = z.lock();
        assert!(!z.apply(&mut st, &[ZerocopyDone { first: 1, last: 2, copied: true }]));
        drop(st);
        assert_eq!(z.gate(10), 2);
        assert!(z.busy());
        let mut st = z.lock();
        assert!(z.apply(&mut st, &[ZerocopyDone { first: 0, last: 0, copied: false }]));
        drop(st);
        assert!(!z.busy(), "every call is done");
        assert_eq!(z.gate(10), 10);
        assert!(z.note().contains("3 sends, 2 copied"), "{}", z.note());
    }

    #[test]
    fn a_notice_before_its_call_returned_is_kept() {
        let z = Zc::new(1);
        z.begin(7);
        let mut st = z.lock();
        // The kernel took call 0 and was done with it at once.
        assert!(!z.apply(&mut st, &[ZerocopyDone { first: 0, last: 0, copied: true }]));
        drop(st);
        z.end(true, Keep::new);
        assert!(z.take_early() && !z.take_early());
        assert!(z.busy(), "recorded, done");
        assert_eq!(z.gate(9), 9, "a done call holds nothing back");
        assert!(!z.busy());
        // A call that sent nothing is not numbered: the next one is 1.
        z.begin(8);
        z.end(false, Keep::new);
        z.begin(8);
        z.end(true, Keep::new);
        let mut st = z.lock();
        assert!(z.apply(&mut st, &[ZerocopyDone { first: 1, last: 1, copied: true }]));
        drop(st);
        assert!(!z.busy());
    }

    #[test]
    fn notice_ranges_wrap() {
        let n = ZerocopyDone { first: u32::MAX - 1, last: 1, copied: false };
        assert!(n.covers(u32::MAX) && n.covers(0) && n.covers(1));
        assert!(!n.covers(2) && !n.covers(u32::MAX - 2));
    }
}
