//! The state of one endpoint that every thread works on ([`EpShared`]):
//! the link to the peer once connected, the send side ([`Tx`]: frames
//! waiting for ring space and requests waiting for their answers) and the
//! receive side ([`Rx`]: posted receives and the frame being taken in);
//! and what a deregistration waits for: a live connection's peer, or the
//! peer of one this side let go of (`Departure`, kept by the IA).

use crate::domain::{IaShared, soft};
use crate::ring::Ring;
use crate::sys::{Dir, Mapping, Piece};
use crate::table::PeerTable;
use crate::wire::Hdr;
use rmr_api::provider::Handover;
use rmr_api::{
    Cookie, DtoCompletion, DtoFlags, DtoOp, EpEvds, EpId, EpState, Event, MemRegion, Status,
};
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A piece of registered memory a DTO reads or writes.
#[derive(Clone)]
pub(crate) struct Seg {
    pub(crate) region: Arc<MemRegion>,
    pub(crate) off: u64,
    pub(crate) len: u64,
}

pub(crate) type Segs = SmallVec<[Seg; 2]>;

impl Seg {
    /// Where the segment's bytes lie (its region is held by whoever holds
    /// the segment: the DTO; inside it, as [`segs_from`] made it from
    /// checked places).
    fn piece(&self) -> Piece {
        debug_assert!(self.region.check(self.off, self.len).is_ok());
        Piece { ptr: self.region.as_ptr().wrapping_add(self.off as usize), len: self.len as usize }
    }
}

/// A local segment's place: its region, the offset in it and its length,
/// read from its LMR once and checked against the region itself
/// ([`rmr_api::provider::seg_place`]): what the raw-pointer copies below
/// are made from, never the LMR's own account read again.
pub(crate) type Place<'a> = (&'a Arc<MemRegion>, u64, u64);

/// The places of a segment list.
pub(crate) use rmr_api::provider::Places;

/// A segment list checked for a post ([`check_local_sges`](rmr_api::provider::check_local_sges))
/// and its places (see [`Place`]), in one pass
/// ([`check_and_place`](rmr_api::provider::check_and_place)): this
/// backend's own LMRs read field by field, every place checked against its
/// region itself.
///
/// # Errors
/// Those of the checks; [`rmr_api::Error::OutOfBounds`] for a segment
/// outside its region.
pub(crate) fn checked_places<'a>(
    sges: &[rmr_api::Sge<'a>],
    pz_id: u64,
    need: rmr_api::Access,
    max_sges: usize,
) -> rmr_api::Result<(u64, Places<'a>)> {
    let mut places = Places::new();
    let total = rmr_api::provider::check_and_place(
        sges,
        (pz_id, need, max_sges),
        |l| Some(l.as_any().downcast_ref::<crate::domain::ShmLmr>()?.facts()),
        &mut places,
        |r, off, len| Some((r, off, len)),
    )?;
    Ok((total, places))
}

/// Where a place's bytes lie now (no hold on the region: for a copy made
/// while the caller's borrow of its LMR keeps it).
pub(crate) fn piece_at(p: &Place<'_>) -> Piece {
    Piece { ptr: p.0.as_ptr().wrapping_add(p.1 as usize), len: p.2 as usize }
}

/// The segments of `places`, each holding its region (for a DTO that
/// outlives the caller's borrow).
pub(crate) fn segs_from(places: &[Place<'_>]) -> Segs {
    rmr_api::provider::small_vec(places.iter().map(|&(r, off, len)| Seg {
        region: r.clone(),
        off,
        len,
    }))
}

/// Moves `len` bytes between `other` and the pieces' bytes taken in order
/// from byte `at` on: into `other` (`Dir::Write`: the pieces are the
/// source) or out of it (`Dir::Read`: the pieces are the destination).
/// `mapped`: `other` is a peer's region mapped here, which its process may
/// read or write at any time: moved as that region's own accessors move
/// its bytes ([`rmr_api::provider::copy_to_mapped`]), not by `memcpy`.
///
/// # Safety
/// Each piece is valid for its length for the call (a segment whose region
/// the DTO holds, or a checked segment the caller's borrow keeps); `other`
/// is valid for `len` bytes the same way: ring space this side owns until
/// it publishes the frame, a frame's payload the consumer owns until it
/// moves the ring's tail, a local value, or a range of a peer's shared
/// file mapped here and checked against the file's length.
pub(crate) unsafe fn copy_runs(
    pieces: impl IntoIterator<Item = Piece>,
    dir: Dir,
    mapped: bool,
    mut at: u64,
    mut other: *mut u8,
    mut len: usize,
) {
    for p in pieces {
        if len == 0 {
            break;
        }
        if at >= p.len as u64 {
            at -= p.len as u64;
            continue;
        }
        let n = (p.len - at as usize).min(len);
        let mine = p.ptr.wrapping_add(at as usize);
        // SAFETY: `[at, at + n)` lies inside the piece and `n <= len`
        // inside `other` (the caller's contract).
        unsafe {
            match (dir, mapped) {
                // Placed as a NIC would: a whole aligned word at once.
                (Dir::Write, false) => rmr_api::provider::place(mine, other, n),
                (Dir::Read, false) => rmr_api::provider::place(other, mine, n),
                (Dir::Write, true) => rmr_api::provider::copy_to_mapped(other, mine, n),
                (Dir::Read, true) => rmr_api::provider::copy_from_mapped(other, mine, n),
            }
        }
        other = other.wrapping_add(n);
        len -= n;
        at = 0;
    }
}

/// Copies `len` bytes of the segments' bytes from `at` on to `dst`.
///
/// # Safety
/// As [`copy_runs`]'s, with `dst` as `other`.
pub(crate) unsafe fn gather(segs: &[Seg], at: u64, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { copy_runs(segs.iter().map(Seg::piece), Dir::Write, false, at, dst, len) }
}

/// Copies `len` bytes at `src` into the segments from byte `at` on.
///
/// # Safety
/// As [`copy_runs`]'s, with `src` as `other` (only read).
pub(crate) unsafe fn scatter(segs: &[Seg], at: u64, src: *const u8, len: usize) {
    // SAFETY: the caller's contract; `src` is only read.
    unsafe { copy_runs(segs.iter().map(Seg::piece), Dir::Read, false, at, src.cast_mut(), len) }
}

/// Copies `len` bytes of the segments' bytes from `at` on to `dst`, as
/// the regions' own accessors read (atomically, word by word): the answer
/// to a peer's RDMA read of this process's memory, which the application
/// may write at any time (no DTO of this side holds it, unlike
/// [`gather`]'s buffers).
///
/// # Safety
/// Each segment lies inside its region; `dst` is writable for `len` bytes,
/// no more than the segments hold from `at` on, and is no region's bytes.
pub(crate) unsafe fn read_out(segs: &[Seg], mut at: u64, mut dst: *mut u8, mut len: usize) {
    for s in segs {
        if len == 0 {
            break;
        }
        if at >= s.len {
            at -= s.len;
            continue;
        }
        let n = ((s.len - at) as usize).min(len);
        // SAFETY: `[at, at + n)` lies inside the segment; `dst` is valid for
        // `n` more bytes (the caller's contract).
        let done = unsafe { rmr_api::provider::copy_out(&s.region, s.off + at, dst, n) };
        debug_assert!(done.is_ok(), "a checked segment outside its region");
        dst = dst.wrapping_add(n);
        len -= n;
        at = 0;
    }
}

/// Copies `len` bytes at `src` into `seg` from byte `at` on, as the
/// region's own accessors write (atomically, word by word): a peer's RDMA
/// write into this process's memory, which the application may read at
/// any time (no DTO of this side holds it, unlike [`scatter`]'s buffers).
///
/// # Safety
/// `[at, at + len)` lies inside the segment, which lies inside its region;
/// `src` is readable for `len` bytes and is no region's bytes.
pub(crate) unsafe fn write_in(seg: &Seg, at: u64, src: *const u8, len: usize) {
    debug_assert!(at + len as u64 <= seg.len);
    // SAFETY: the caller's contract.
    let done = unsafe { rmr_api::provider::copy_in(&seg.region, seg.off + at, src, len) };
    debug_assert!(done.is_ok(), "a checked segment outside its region");
}

/// The connection to the peer, fixed once connected.
pub(crate) struct Link {
    /// Keeps the rings' memory mapped.
    pub(crate) _map: Arc<Mapping>,
    /// What this side produces.
    pub(crate) out: Ring,
    /// What the peer produces.
    pub(crate) inc: Ring,
    /// This side's doorbell (the peer writes it).
    pub(crate) my_efd: OwnedFd,
    /// The peer's doorbell.
    pub(crate) peer_efd: OwnedFd,
    /// The set-up socket, kept only to learn that the peer is gone.
    pub(crate) sock: OwnedFd,
    pub(crate) peer_pid: i32,
    /// The protection zone of the peer's EP.
    pub(crate) peer_pz: u64,
    pub(crate) peer_table: PeerTable,
    /// Cross-memory attach works to the peer (else: why not).
    pub(crate) cma: Result<(), String>,
    pub(crate) peer_name: String,
}

impl Link {
    /// Rings the peer's doorbell if it sleeps on data this side produced.
    pub(crate) fn wake_consumer(&self) {
        let w = self.out.want_data();
        if w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0 {
            let _ = rustix::io::write(&self.peer_efd, &1u64.to_ne_bytes());
        }
    }

    /// Rings the peer's doorbell if it waits for room this side freed.
    pub(crate) fn wake_producer(&self) {
        let w = self.inc.want_space();
        if w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0 {
            let _ = rustix::io::write(&self.peer_efd, &1u64.to_ne_bytes());
        }
    }
}

/// A frame (and its `Cont`s) waiting for ring space.
pub(crate) struct OutFrame {
    pub(crate) h: Hdr,
    pub(crate) segs: Segs,
}

/// A request waiting for its completion, in posting order.
pub(crate) struct Out {
    pub(crate) cookie: Cookie,
    pub(crate) op: DtoOp,
    pub(crate) flags: DtoFlags,
    pub(crate) bytes: u64,
    /// Its sequence number on the ring (`None`: done by cross-memory attach).
    pub(crate) seq: Option<u64>,
    /// It touches the target's memory through the ring (write, read, atomic).
    pub(crate) memop: bool,
    /// Where a read's data or an atomic's old value goes.
    pub(crate) local: Segs,
    pub(crate) done: Option<Status>,
    /// An atomic's old value (the completion's `imm`).
    pub(crate) old: Option<u64>,
}

/// The send side.
#[derive(Default)]
pub(crate) struct Tx {
    pub(crate) pending: VecDeque<OutFrame>,
    /// Payload bytes of `pending`'s first frame already in the ring.
    pub(crate) sent: u64,
    pub(crate) outstanding: VecDeque<Out>,
    pub(crate) next_seq: u64,
    /// Ring requests touching the target's memory not answered yet: a
    /// cross-memory access may not overtake them.
    pub(crate) unapplied: usize,
    /// The peer's `acked` line as last applied.
    pub(crate) acked: u64,
    /// The peer's shared files mapped here.
    pub(crate) files: crate::sys::Files,
}

/// A posted receive.
pub(crate) struct Recv {
    pub(crate) cookie: Cookie,
    pub(crate) segs: Segs,
    pub(crate) cap: u64,
}

/// The request whose payload is being taken in.
pub(crate) enum Cur {
    /// A message into a receive.
    Recv { recv: Recv, seq: u64, total: u64, got: u64, solicited: bool },
    /// A write into a region; with immediate: the receive it completes.
    Write {
        seg: Seg,
        /// Its LMR: a deregistration stops the frames still to come.
        lmr: Arc<crate::domain::LmrInner>,
        seq: u64,
        total: u64,
        got: u64,
        imm: Option<(u64, Recv)>,
    },
    /// A read's answer into the request's local segments.
    ReadResp { segs: Segs, seq: u64, total: u64, got: u64 },
    /// Payload of a refused request: skipped.
    Discard { left: u64 },
}

/// The receive side.
#[derive(Default)]
pub(crate) struct Rx {
    pub(crate) recvs: VecDeque<Recv>,
    pub(crate) cur: Option<Cur>,
    /// The last request handled that needs only "it worked" as its answer.
    pub(crate) ack: Option<u64>,
    /// Since when the frame at the head waits for a receive.
    pub(crate) rnr_since: Option<Instant>,
}

/// One wait begun, in [`EpShared::drivers`].
pub(crate) const WAIT_BEGUN: u64 = 1 << 32;

pub(crate) struct EpShared {
    pub(crate) id: EpId,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) pz_id: u64,
    pub(crate) evds: EpEvds,
    state: AtomicU8,
    pub(crate) link: OnceLock<Link>,
    pub(crate) tx: Mutex<Tx>,
    pub(crate) rx: Mutex<Rx>,
    /// Application threads driving this EP now (the low 32 bits: the
    /// helper stands back while any does) and waits begun (the high bits;
    /// both in one word, so that entering costs one atomic operation).
    pub(crate) drivers: AtomicU64,
    /// When the helper takes the EP over from threads that compute between
    /// waits, and looks again soon after (quick looks every
    /// [`QUICK`](crate::helper::QUICK)).
    pub(crate) handover: Handover,
    /// When the last thread left a long wait and told the helper (on the
    /// [`now_ns`](rmr_api::provider::clock::now_ns) scale; `u64::MAX` once
    /// the helper took the EP over otherwise, when nobody knows). A thread
    /// that drives the EP again within [`QUICK`](crate::helper::QUICK) of
    /// leaving, after the helper took it over, came back quickly: it polls
    /// in waits ([`Handover::returned`]).
    pub(crate) left_at: AtomicU64,
    /// When the helper last took the endpoint over unasked (no leave told
    /// it; `left_at` then unknown), on the `now_ns` scale: a thread that
    /// comes back a quick period or more after it stayed away.
    pub(crate) taken_at: AtomicU64,
    /// That thread told the helper, which has not taken the EP over since
    /// (cleared by a thread that drives it again first).
    pub(crate) handing: AtomicBool,
    /// A sleeper armed the doorbell: the next drive drains it.
    pub(crate) efd_armed: AtomicBool,
    /// The IA's helper sleeps on this EP's doorbell: a thread that starts
    /// driving tells it (the wake-up may now go to that thread instead).
    pub(crate) helper_armed: AtomicBool,
    /// The connection ended and the EP left its EVDs.
    pub(crate) detached: AtomicBool,
    /// The frame at the head of the peer's ring waits for a receive:
    /// nothing behind it can be taken until one is posted (or its
    /// receiver-not-ready deadline passes).
    pub(crate) rx_blocked: AtomicBool,
    /// The peer's `acked` line as last applied (for cheap looks).
    pub(crate) acked_seen: std::sync::atomic::AtomicU64,
}

fn state_of(b: u8) -> EpState {
    match b {
        0 => EpState::Unconnected,
        1 => EpState::Pending,
        2 => EpState::Connected,
        3 => EpState::Disconnected,
        _ => EpState::Broken,
    }
}

fn byte_of(s: EpState) -> u8 {
    match s {
        EpState::Unconnected => 0,
        EpState::Pending => 1,
        EpState::Connected => 2,
        EpState::Disconnected => 3,
        EpState::Broken => 4,
    }
}

impl EpShared {
    pub(crate) fn new(ia: Arc<IaShared>, pz_id: u64, evds: EpEvds) -> EpShared {
        EpShared {
            id: EpId::fresh(),
            ia,
            pz_id,
            evds,
            state: AtomicU8::new(0),
            link: OnceLock::new(),
            tx: Mutex::new(Tx::default()),
            rx: Mutex::new(Rx::default()),
            drivers: AtomicU64::new(0),
            handover: Handover::new(),
            left_at: AtomicU64::new(u64::MAX),
            taken_at: AtomicU64::new(0),
            handing: AtomicBool::new(false),
            efd_armed: AtomicBool::new(false),
            helper_armed: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            acked_seen: std::sync::atomic::AtomicU64::new(0),
            rx_blocked: AtomicBool::new(false),
        }
    }

    pub(crate) fn state(&self) -> EpState {
        state_of(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, s: EpState) {
        self.state.store(byte_of(s), Ordering::Release);
    }

    pub(crate) fn cas_state(&self, from: EpState, to: EpState) -> bool {
        self.state
            .compare_exchange(byte_of(from), byte_of(to), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn tx(&self) -> std::sync::MutexGuard<'_, Tx> {
        self.tx.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn rx(&self) -> std::sync::MutexGuard<'_, Rx> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push_to(&self, evd: &Arc<dyn rmr_api::Evd>, ev: Event) {
        if let Ok(s) = soft(evd) {
            s.push(ev);
        }
    }

    pub(crate) fn push_request(&self, ev: Event) {
        self.push_to(&self.evds.request, ev);
    }

    pub(crate) fn push_recv(&self, ev: Event) {
        self.push_to(&self.evds.recv, ev);
    }

    pub(crate) fn push_conn(&self, ev: Event) {
        self.push_to(&self.evds.conn, ev);
    }

    /// A receive's completion.
    pub(crate) fn recv_done(
        &self,
        r: &Recv,
        op: DtoOp,
        status: Status,
        bytes: u64,
    ) -> DtoCompletion {
        DtoCompletion::new(self.id, r.cookie, op, status, bytes)
    }

    /// The EVDs, each once.
    pub(crate) fn distinct_evds(&self) -> Vec<&SoftEvdRef> {
        let mut v: Vec<&Arc<dyn rmr_api::Evd>> = Vec::new();
        for e in [&self.evds.request, &self.evds.recv, &self.evds.conn] {
            if !v.iter().any(|x| Arc::ptr_eq(x, e)) {
                v.push(e);
            }
        }
        v
    }
}

/// An EVD handle (every one a `SoftEvd`, checked when the EP is made).
pub(crate) type SoftEvdRef = Arc<dyn rmr_api::Evd>;

impl crate::domain::Peer for EpShared {
    fn quiesce(&self, until: Instant) -> bool {
        let Some(link) = self.link.get() else { return true };
        // The peer's accesses to our memory are counted on the ring it
        // produces (ours to consume).
        while link.inc.cma_busy().load(Ordering::SeqCst) != 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        }
        // A frame of the peer's being placed by this side's receive path
        // (under the receive lock) ends first; the next one sees the
        // region deregistered. (A try: never a wait on a lock this very
        // thread could hold.)
        loop {
            match self.rx.try_lock() {
                Ok(_) | Err(std::sync::TryLockError::Poisoned(_)) => return true,
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::yield_now();
                }
                Err(std::sync::TryLockError::WouldBlock) => return false,
            }
        }
    }
}

/// What a connection leaves to its IA when this side lets it go (the
/// `EpShared` is dropped): the ring the peer counts its cross-memory
/// accesses on, and the set-up socket, shut for writing (the peer sees
/// the hang-up as before), whose end says the peer's endpoint is gone.
struct Departure {
    inc: crate::ring::Ring,
    sock: OwnedFd,
}

impl crate::domain::Departed for Departure {
    fn quiesce(&self, until: Instant) -> bool {
        while self.inc.cma_busy().load(Ordering::SeqCst) != 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    fn finished(&self) -> bool {
        if self.inc.cma_busy().load(Ordering::SeqCst) != 0 {
            return false;
        }
        let mut pfd = [rustix::event::PollFd::new(&self.sock, rustix::event::PollFlags::RDHUP)];
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        matches!(rustix::event::poll(&mut pfd, Some(&zero)), Ok(n) if n > 0)
            && pfd[0].revents().intersects(
                rustix::event::PollFlags::RDHUP
                    | rustix::event::PollFlags::HUP
                    | rustix::event::PollFlags::ERR,
            )
    }
}

impl Drop for EpShared {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            // The peer may be inside a cross-memory access to this IA's
            // memory still (a post that passed its table lookup): a later
            // deregistration waits for it (`IaShared::depart`).
            let _ = rustix::net::shutdown(&link.sock, rustix::net::Shutdown::Write);
            self.ia.depart(Arc::new(Departure { inc: link.inc, sock: link.sock }));
        }
    }
}
