//! A small RDMA write and what follows it in one TCP segment (the `tcp`
//! provider).
//!
//! libfabric's `tcp` provider hands every operation to the kernel in a
//! `sendmsg` of its own and honours no `FI_MORE`, so an RDMA write and the
//! send that tells the peer about it (rmr's write + notify) would cross the
//! wire as two segments, each transmitted, received and taken in by the
//! peer's progress on its own. Here an endpoint's socket is *corked*
//! (`TCP_CORK`) while a small write is posted, and uncorked right after
//! the next operation of another kind (the send), so the two leave as one
//! segment; the sender still makes both `sendmsg` calls (the first only
//! queues), plus the two `setsockopt` calls. What is corked stays within
//! one TCP segment (`TCP_MAXSEG`): a write is corked only if it leaves
//! room for the send after it, and an operation that would not fit beside
//! what is corked sends that first (on a shaped link, corked data that
//! spilled into a second segment was sent tens of microseconds late).
//! Bytes the provider itself writes while the socket is corked (a read's
//! response, an acknowledgement) are not counted; they can still push
//! corked data past one segment until the next uncork. The provider's frames, their
//! order and libfabric's view of them are unchanged (the kernel only holds
//! the bytes until the uncork).
//!
//! A cork never outlives the moment someone would wait for it:
//! - a write is corked only while no thread waits on the endpoint's CQs
//!   and one left such a wait less than [`crate::evd::LINGER`] ago (the
//!   thread that posts it is about to post again or to wait), and only
//!   while the CQs' progress threads run; a waiter that entered
//!   meanwhile is seen after the cork is published, which is then undone;
//! - a thread entering a wait on an ofi CQ, and every drive of one,
//!   uncorks every corked endpoint of the process first (a waiter that
//!   posted a lone write sends it as its wait begins; a waiter on another
//!   EVD may so send a write before the send it waited for, which costs
//!   only the coalescing);
//! - the CQ's progress thread uncorks each time it wakes, and is woken by
//!   the corker if it already sleeps on the CQ. It looks every
//!   [`crate::evd::LINGER`] while it stands back, but its naps grow (up to
//!   16 ms) while waiters keep coming and going, so then a lone write may
//!   wait about that long; one it sent ([`left_to_others`]) makes its naps
//!   short again until the waiters have come and gone for a while.
//!
//! Locks: an endpoint's transmit lock, then [`LISTED`]'s; [`uncork_all`]
//! lets go of [`LISTED`] before it takes any transmit lock.
//!
//! The socket is found once per connection (`/proc/self/fd`, matched by its
//! local and peer address) and held as a duplicate descriptor of this
//! module's own, so that it can never name another file; where it cannot be
//! found nothing is corked.

use crate::evd::CqDriver;
use smallvec::SmallVec;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Endpoints corked now (a hint for drivers: zero means nothing to do).
static CORKED: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    /// Corked sockets and held writes that this thread, a progress
    /// thread, sent (see [`left_to_others`]).
    static LEFT_OVER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
/// Endpoints that corked since the last [`uncork_all`] (each listed once
/// per opening of its connection).
static LISTED: Mutex<Vec<Weak<crate::ep::EpShared>>> = Mutex::new(Vec::new());

/// Who sent what a corked socket held.
#[derive(Clone, Copy)]
pub(crate) enum By {
    /// The post of an operation of another kind (the send after a write).
    Post,
    /// A thread that began to wait on, drove or flushed an ofi CQ.
    Waiter,
    /// A CQ's progress thread.
    Progress,
}

impl By {
    /// Whether the write waited for a progress thread's wake-up.
    fn left_over(self) -> bool {
        matches!(self, By::Progress)
    }
}

/// How many corked sockets and held writes the calling progress thread
/// sent (a lone write whose poster went on without posting or waiting, or
/// one it could not send at once): a progress thread that sees this grow
/// looks often again, since such writes wait for its wake-ups. Counted per
/// thread: any progress thread sends every endpoint's (see
/// [`uncork_all`]), so the one that found such writes keeps looking often
/// and the others' naps may grow.
pub(crate) fn left_to_others() -> u64 {
    LEFT_OVER.with(std::cell::Cell::get)
}

/// One connection's socket, as the transmit state holds it (all under the
/// endpoint's transmit lock).
pub(crate) struct Cork {
    fd: OwnedFd,
    /// Whether the socket is corked now.
    on: bool,
    /// Whether the endpoint is in [`LISTED`].
    listed: bool,
    /// The endpoint's CQ drivers (transmit, receive): who waits, who left.
    drivers: SmallVec<[Arc<CqDriver>; 2]>,
    /// Corks so far; uncorks by [`By::Post`], [`By::Waiter`] and
    /// [`By::Progress`]; and of the first, those before a post that would
    /// not have fit in the segment; writes held (see [`crate::eager`]);
    /// held writes that rode in a send; held writes posted alone by
    /// [`By::Post`], [`By::Waiter`] and [`By::Progress`] (the endpoint's
    /// `ofi.cork` note).
    counts: [u64; 10],
    /// Whether a write is held (the endpoint's last transmit record).
    holding: bool,
    /// The connection's segment size (`TCP_MAXSEG`): what is corked stays
    /// within one segment.
    seg: u64,
    /// The largest write corked: `cork_max`, and room left in the segment
    /// for the operation after it ([`ROOM`]).
    max: u64,
    /// Bytes corked now (payloads and an estimate of their frames' headers).
    held: u64,
}

/// A frame's header and what else the provider adds, as counted in
/// [`Cork::held`] (libfabric 1.17's `tcp` headers are 40-56 bytes).
const FRAME: u64 = 64;
/// Room kept in the segment for the operation after a corked write (the
/// send that announces it).
const ROOM: u64 = 256;

impl Cork {
    /// The socket of the connection from `local` to `peer`, if this process
    /// holds it.
    pub(crate) fn find(
        local: SocketAddr,
        peer: SocketAddr,
        drivers: SmallVec<[Arc<CqDriver>; 2]>,
        cork_max: u64,
    ) -> Option<Cork> {
        let mut fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
            .ok()?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        // The newest connection's descriptor is most likely among the highest.
        fds.sort_unstable_by(|a, b| b.cmp(a));
        for n in fds {
            let is_socket = std::fs::read_link(format!("/proc/self/fd/{n}"))
                .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
            if !is_socket {
                continue;
            }
            // SAFETY: fcntl on any integer is memory-safe: on a number that
            // was closed meanwhile it fails, on one reused it duplicates
            // another file, which the address check below rejects.
            let dup = unsafe { libc::fcntl(n, libc::F_DUPFD_CLOEXEC, 0) };
            if dup < 0 {
                continue;
            }
            // SAFETY: `dup` is a descriptor fcntl just created for us alone.
            let fd = unsafe { OwnedFd::from_raw_fd(dup) };
            let named = |a: Option<rustix::net::SocketAddrAny>| {
                a.and_then(|a| SocketAddr::try_from(a).ok())
            };
            if named(rustix::net::getsockname(&fd).ok()) == Some(local)
                && named(rustix::net::getpeername(&fd).ok().flatten()) == Some(peer)
            {
                let seg = segment(&fd)?;
                let max = cork_max.min(seg.saturating_sub(ROOM + 2 * FRAME));
                return Some(Cork {
                    fd,
                    on: false,
                    listed: false,
                    drivers,
                    counts: [0; 10],
                    holding: false,
                    seg,
                    max,
                    held: 0,
                });
            }
        }
        None
    }

    /// Whether a write posted now may wait in the socket for what follows:
    /// nobody waits on the endpoint's CQs, their progress threads run, and
    /// someone left such a wait within [`crate::evd::LINGER`].
    fn worth_it(&self) -> bool {
        self.drivers.iter().all(|d| !d.waited_on() && d.pumping())
            && self.drivers.iter().any(|d| d.left_lately())
    }

    /// Before an operation with `bytes` of payload is posted (`write`: an
    /// RDMA write without immediate): what is corked goes now if the
    /// operation would not fit beside it in the segment (for a write to be
    /// corked: beside it and the send after it; corked data that spills
    /// into a second segment is sent late on a shaped link); a small write
    /// is corked if that pays. Returns whether the socket is to be
    /// released after the post (the operation leaves with what is held).
    pub(crate) fn before_post(
        &mut self,
        bytes: u64,
        write: bool,
        ep: &Weak<crate::ep::EpShared>,
    ) -> bool {
        let frame = bytes.saturating_add(FRAME);
        let corks = write && bytes <= self.max;
        let need = if corks { frame + ROOM + FRAME } else { frame };
        if self.on && self.held.saturating_add(need) > self.seg {
            self.counts[4] += 1;
            self.release(By::Post);
        }
        if corks {
            self.cork(ep);
            if self.on {
                self.held += frame;
            }
            return false;
        }
        self.on
    }

    /// After the post [`Cork::before_post`] prepared: sends what is
    /// corked if it said so, and takes back a cork for a write that was
    /// not posted.
    pub(crate) fn after_post(&mut self, release: bool, posted: bool) {
        if release || !posted {
            // A write that was not posted has nothing to wait for.
            self.release(By::Post);
        }
    }

    /// Corks the socket if that pays.
    fn cork(&mut self, ep: &Weak<crate::ep::EpShared>) {
        if self.on || !self.worth_it() {
            return;
        }
        if rustix::net::sockopt::set_tcp_cork(&self.fd, true).is_err() {
            return;
        }
        self.on = true;
        self.counts[0] += 1;
        // Listed before counted: whoever sees the count finds the entry.
        if !self.listed {
            self.listed = true;
            LISTED.lock().unwrap_or_else(|e| e.into_inner()).push(ep.clone());
        }
        CORKED.fetch_add(1, Ordering::SeqCst);
        // A waiter that entered since `worth_it` may have driven before the
        // count above, seen nothing and gone to sleep: with the count
        // published (SeqCst, as its entry), one of the two sees the other.
        if self.drivers.iter().any(|d| d.waited_on()) {
            self.release(By::Waiter);
            return;
        }
        // A progress thread that went to sleep on its CQ before this cork
        // would not see it for a long while: wake it (it uncorks).
        for d in &self.drivers {
            d.kick_if_sleeping();
        }
    }

    /// Whether a small suppressed write posted now may be held for the
    /// next send (see [`crate::eager`]): as for a cork, and published the
    /// same way, so that a waiter entering meanwhile sends it.
    pub(crate) fn hold(&mut self, ep: &Weak<crate::ep::EpShared>) -> bool {
        if self.holding || !self.worth_it() {
            return false;
        }
        self.holding = true;
        if !self.listed {
            self.listed = true;
            LISTED.lock().unwrap_or_else(|e| e.into_inner()).push(ep.clone());
        }
        CORKED.fetch_add(1, Ordering::SeqCst);
        if self.drivers.iter().any(|d| d.waited_on()) {
            // Nothing is held yet: the write is posted as usual.
            self.holding = false;
            CORKED.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        self.counts[5] += 1;
        for d in &self.drivers {
            d.kick_if_sleeping();
        }
        true
    }

    /// The held write left: in a send (`by` `None`) or posted alone.
    pub(crate) fn unhold(&mut self, by: Option<By>) {
        if self.holding {
            self.holding = false;
            CORKED.fetch_sub(1, Ordering::SeqCst);
            self.counts[by.map_or(6, |b| 7 + b as usize)] += 1;
            if by.is_some_and(By::left_over) {
                LEFT_OVER.with(|n| n.set(n.get() + 1));
            }
        }
    }

    /// Takes back a hold for a write that was not held after all.
    pub(crate) fn cancel_hold(&mut self) {
        if self.holding {
            self.holding = false;
            self.counts[5] -= 1;
            CORKED.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Lists the endpoint again (a held write could not be posted yet:
    /// the next waiter or progress pass tries again).
    pub(crate) fn relist(&mut self, ep: &Weak<crate::ep::EpShared>) {
        self.listed = true;
        LISTED.lock().unwrap_or_else(|e| e.into_inner()).push(ep.clone());
    }

    /// After an operation of another kind was posted, or a write was not
    /// (`by` [`By::Post`]), or when someone waits or drives: sends what
    /// the socket holds.
    pub(crate) fn release(&mut self, by: By) {
        if self.on {
            self.on = false;
            self.held = 0;
            self.counts[1 + by as usize] += 1;
            if by.left_over() {
                LEFT_OVER.with(|n| n.set(n.get() + 1));
            }
            CORKED.fetch_sub(1, Ordering::SeqCst);
            // An error here (the connection broke) leaves nothing to send.
            let _ = rustix::net::sockopt::set_tcp_cork(&self.fd, false);
        }
    }

    /// Releases the socket uncounted (as the connection closes).
    fn reset(&mut self) {
        if self.holding {
            self.holding = false;
            CORKED.fetch_sub(1, Ordering::SeqCst);
        }
        if self.on {
            self.on = false;
            self.held = 0;
            CORKED.fetch_sub(1, Ordering::SeqCst);
            let _ = rustix::net::sockopt::set_tcp_cork(&self.fd, false);
        }
    }

    /// Releases the socket and notes the endpoint off the list (which
    /// [`uncork_all`] took it from, or its socket is about to close).
    pub(crate) fn unlist(&mut self, by: By) {
        self.release(by);
        self.listed = false;
    }

    /// The endpoint's `ofi.cork` note: writes corked, then sent by a post
    /// (of which before a post, not to spill a segment), by a waiter, by
    /// the progress thread; the largest write corked.
    pub(crate) fn note(&self) -> String {
        let [c, p, w, g, x, h, r, hp, hw, hg] = self.counts;
        format!(
            "corked {c}, sent by a post {p} (before it, not to spill a segment: {x}), \
             by a waiter {w}, by the progress thread {g}; writes up to {} bytes; \
             held {h}, rode in a send {r}, posted alone by a post {hp}, by a waiter {hw}, \
             by the progress thread {hg}",
            self.max
        )
    }
}

/// The connection's segment size (`TCP_MAXSEG`).
fn segment(fd: &OwnedFd) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given, and
    // `fd` is open for the call.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0 && v > 0).then_some(v as u64)
}

impl Drop for Cork {
    fn drop(&mut self) {
        self.reset();
    }
}

/// Whether some endpoint of the process is corked now.
pub(crate) fn any() -> bool {
    CORKED.load(Ordering::SeqCst) > 0
}

/// Uncorks every corked endpoint of the process (what a thread entering
/// a wait, a drive, a flush and the progress thread call when [`any`]
/// says so).
pub(crate) fn uncork_all(by: By) {
    let eps = std::mem::take(&mut *LISTED.lock().unwrap_or_else(|e| e.into_inner()));
    for ep in eps {
        if let Some(ep) = ep.upgrade() {
            ep.uncork(by);
        }
    }
}
