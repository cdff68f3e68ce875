//! The endpoint's shared state, [`EpShared`]: what the poster, the reader,
//! the IA's progress helper and waiting threads all work on (connection state,
//! the in-flight and receive queues, the timers), and its small helpers.

use crate::domain::IaShared;
use crate::ep::rx::RxState;
use crate::tx::{Segs, Tx};
use rmr_api::Cookie;
use rmr_api::provider::{Handover, SoftEvd};
use rmr_api::{DtoCompletion, DtoOp, EpEvds, EpId, EpState, Error, Event, Result, Status};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// After an application thread stops driving an EP, the IA's progress
/// helper waits this long before it takes over (a waiter that comes straight back,
/// as in a ping-pong, never hands the socket to another thread). Its timers
/// wait in whole milliseconds (`rmr_api::provider::clock::helper_grain`):
/// the look itself comes about 1 ms after the thread left, or at the
/// helper's watch (`watch_ms`, 2 ms by default) when it has no quick looks
/// left.
pub(super) const LINGER: Duration = Duration::from_micros(200);

/// How long an orderly disconnect waits for the peer's answer.
pub(super) const DISCONNECT_WAIT: Duration = Duration::from_secs(3);

pub(super) use rmr_api::provider::clock::{instant_of, now_ns, ns_of};

/// A deadline that the threads driving an EP read on every pass without a
/// lock: on the [`now_ns`] scale, 0 for none.
pub(super) struct Deadline(AtomicU64);

impl Deadline {
    pub(super) const fn none() -> Deadline {
        Deadline(AtomicU64::new(0))
    }

    pub(super) fn ns(t: Instant) -> u64 {
        ns_of(t).max(1)
    }

    pub(super) fn at(&self) -> Option<Instant> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            ns => Some(instant_of(ns)),
        }
    }

    pub(super) fn set(&self, t: Instant) {
        self.0.store(Self::ns(t), Ordering::Release);
    }

    /// Sets it unless one is set already; returns whether it did.
    pub(super) fn set_if_none(&self, t: Instant) -> bool {
        self.0.compare_exchange(0, Self::ns(t), Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Replaces it with `t` if it is still set to `seen` (a value read by
    /// [`Deadline::raw`]); returns whether it did.
    pub(super) fn replace(&self, seen: u64, t: Instant) -> bool {
        seen != 0
            && self
                .0
                .compare_exchange(seen, Self::ns(t), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Its current value, for [`Deadline::replace`] (0: none).
    pub(super) fn raw(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    pub(super) fn clear(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// Whether it is set and has passed (no clock read when unset).
    pub(super) fn passed(&self) -> bool {
        let d = self.0.load(Ordering::Acquire);
        d != 0 && now_ns() >= d
    }

    /// Clears it if it has passed; returns whether this call did.
    pub(super) fn take_passed(&self) -> bool {
        let d = self.0.load(Ordering::Acquire);
        d != 0
            && now_ns() >= d
            && self.0.compare_exchange(d, 0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// A send-side DTO waiting for its acknowledgement or response.
pub(crate) struct Inflight {
    pub(crate) seq: u64,
    pub(crate) cookie: u64,
    pub(crate) op: DtoOp,
    pub(crate) signalled: bool,
    pub(crate) bytes: u64,
    /// Where a read response or an atomic's old value lands.
    pub(crate) dest: Segs,
}

/// A posted receive.
pub(crate) struct RecvWr {
    pub(crate) cookie: u64,
    pub(crate) segs: Segs,
    pub(crate) total: u64,
}

pub(crate) struct EpShared {
    pub(crate) id: EpId,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) pz_id: u64,
    pub(crate) evds: EpEvds,
    pub(super) state: AtomicU8,
    pub(crate) tx: OnceLock<Tx>,
    pub(crate) rx: Mutex<Option<RxState>>,
    pub(crate) peer: OnceLock<SocketAddr>,
    pub(crate) inflight: Mutex<VecDeque<Inflight>>,
    pub(crate) recvs: Mutex<VecDeque<RecvWr>>,
    /// Highest peer request sequence number fully handled here.
    pub(crate) rx_done: AtomicU64,
    /// Highest `rx_done` value carried to the peer in any frame.
    pub(crate) acked_sent: AtomicU64,
    /// Highest acknowledgement received from the peer (diagnostics).
    pub(crate) acked_rcvd: AtomicU64,
    /// The highest acknowledgement the receive side has applied (passed
    /// to `complete_upto` after handling its frame): what completions held
    /// back for the kernel's zero-copy notices may go up to once they come
    /// (`acked_rcvd` is raised before a frame is handled).
    pub(crate) acked_applied: AtomicU64,
    /// Held across taking acknowledged DTOs out of the in-flight queue and
    /// reporting them, when threads other than the receive side complete
    /// too (with zero-copy sends), and by the end's flush: completions stay
    /// in order. (A response's request is taken out by the receive side
    /// alone, after the ones before it; nothing after it completes before
    /// the receive side has reported it.)
    pub(crate) completing: Mutex<()>,
    /// Frames sent and received (diagnostics).
    pub(crate) frames: [AtomicU64; 2],
    pub(crate) ended: AtomicBool,
    pub(crate) local_disconnect: AtomicBool,
    /// The receive side waits for a posted receive until this deadline.
    pub(super) stalled: AtomicBool,
    pub(super) stall_until: Deadline,
    /// An orderly disconnect gives up waiting for the peer at this time.
    pub(super) disconnect_until: Deadline,
    /// A delayed acknowledgement is due at this time, for the peer's
    /// requests up to `ack_for` (`rx_done` when it was armed).
    pub(super) ack_due: Deadline,
    pub(super) ack_for: AtomicU64,
    /// Threads driving this EP now, waits begun, and when the last one left.
    pub(super) active: AtomicUsize,
    pub(super) waits: AtomicU64,
    pub(super) left_at: AtomicU64,
    /// The progress helper watches the socket (an arriving waiter kicks it).
    pub(super) bg_polling: AtomicBool,
    /// When the helper takes the EP over from threads that compute between
    /// waits, and looks again soon after (quick looks every [`LINGER`]; a
    /// thread counts as back quickly within [`LINGER`] of leaving).
    pub(super) handover: Handover,
    /// The last driver left a long wait and kicked the helper: it takes
    /// the EP over at once, without [`LINGER`] (cleared by a thread that
    /// drives it again first).
    pub(super) handing: AtomicBool,
    /// The peer-stall clock: when frames last waited with nothing moving
    /// (on the [`now_ns`] scale, 0: nothing waits), and the byte and frame
    /// counts last seen moving; `stalled_for` once the EP ended for it.
    pub(super) stuck_since: AtomicU64,
    pub(super) stuck_seen: [AtomicU64; 2],
    pub(super) stalled_for: OnceLock<Duration>,
    /// The user's handle is gone: a background connect still under way
    /// gives up instead of starting an endpoint nobody holds.
    pub(super) abandoned: AtomicBool,
    /// The EP's slot in the IA's progress engine, and whether a kick of it
    /// waits for the helper.
    pub(super) slot: AtomicUsize,
    pub(super) kick_pending: AtomicBool,
    /// What the connection's send buffer was set to, and why (the EP's
    /// `sndbuf` note; see [`crate::TcpConfig::near_sndbuf`]).
    pub(super) sndbuf: OnceLock<String>,
    /// Why the EP sends no payload zero-copy (the `zerocopy` note; see
    /// [`crate::TcpConfig::zerocopy`]), when it does not.
    pub(super) zc_off: OnceLock<String>,
}

pub(super) fn state_from(v: u8) -> EpState {
    match v {
        0 => EpState::Unconnected,
        1 => EpState::Pending,
        2 => EpState::Connected,
        3 => EpState::Disconnected,
        _ => EpState::Broken,
    }
}

pub(super) fn state_to(s: EpState) -> u8 {
    match s {
        EpState::Unconnected => 0,
        EpState::Pending => 1,
        EpState::Connected => 2,
        EpState::Disconnected => 3,
        EpState::Broken => 4,
    }
}

pub(crate) fn push(evd: &Arc<dyn rmr_api::Evd>, ev: Event) {
    if let Some(s) = evd.as_any().downcast_ref::<SoftEvd>() {
        s.push(ev);
    }
}

impl EpShared {
    pub(crate) fn state(&self) -> EpState {
        state_from(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, s: EpState) {
        self.state.store(state_to(s), Ordering::Release);
    }

    pub(super) fn cas_state(&self, from: EpState, to: EpState) -> bool {
        self.state
            .compare_exchange(state_to(from), state_to(to), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Too many frames wait for the socket: the receive side takes no new
    /// frame until they drain. An honest peer never causes it: its window
    /// bounds its requests (each gets at most one response or ack) and
    /// ours bounds our own, so the queue stays under twice the window; the
    /// bound only stops a peer that sends requests and never reads.
    pub(crate) fn tx_backlogged(&self) -> bool {
        self.tx.get().is_some_and(|t| t.queued() > 3 * self.ia.cfg.max_dtos.max(64))
    }

    /// The EP's `zerocopy` note.
    pub(super) fn zerocopy_note(&self) -> String {
        match self.zc() {
            Some(z) => z.note(),
            None => self.zc_off.get().cloned().unwrap_or_else(|| "-".into()),
        }
    }

    /// After a push or a flush: a zero-copy call that was done as it
    /// returned left no notice to wake anyone for its frame's completion,
    /// so this thread lets it go.
    #[inline]
    pub(crate) fn early_zerocopy(&self) {
        if self.zc().is_some_and(|z| z.take_early()) && !self.reap_zerocopy() {
            self.release_upto(self.acked_applied.load(Ordering::Acquire));
        }
    }

    /// Reads the kernel's zero-copy notices, if sends wait for them, and
    /// completes what they held back. Returns whether any DTO could go.
    #[inline]
    pub(crate) fn reap_zerocopy(&self) -> bool {
        match self.zc() {
            Some(z) if z.busy() => self.reap_notices(z),
            _ => false,
        }
    }

    /// The zero-copy sends, when the EP makes them.
    #[inline]
    pub(crate) fn zc(&self) -> Option<&crate::zerocopy::Zc> {
        self.tx.get().and_then(|t| t.zc.as_ref())
    }

    #[inline(never)]
    fn reap_notices(&self, z: &crate::zerocopy::Zc) -> bool {
        let Some(tx) = self.tx.get() else { return false };
        match z.reap(tx.stream().as_fd()) {
            Ok(true) => {
                self.release_upto(self.acked_applied.load(Ordering::Acquire));
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(target: "rmr::tcp", ep = self.id.0, "zero-copy notices: {e}");
                false
            }
        }
    }

    pub(crate) fn tx(&self) -> Result<&Tx> {
        self.tx.get().ok_or(Error::NotConnected)
    }

    pub(super) fn check_connected(&self) -> Result<()> {
        match self.state() {
            EpState::Connected => Ok(()),
            EpState::Broken if self.stalled_for.get().is_some() => {
                Err(Error::PeerStalled { waited: *self.stalled_for.get().expect("set") })
            }
            EpState::Broken => Err(Error::Broken("endpoint is broken".into())),
            _ => Err(Error::NotConnected),
        }
    }

    /// Completes `c` on the request EVD.
    pub(crate) fn complete(&self, c: DtoCompletion) {
        let evd = if matches!(c.op, DtoOp::Recv | DtoOp::RecvWriteImm) {
            &self.evds.recv
        } else {
            &self.evds.request
        };
        push(evd, Event::Dto(c));
    }

    pub(crate) fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion::new(self.id, Cookie(cookie), op, status, bytes)
    }

    /// The EP's EVDs, each once.
    pub(super) fn distinct_evds(&self) -> impl Iterator<Item = &SoftEvd> {
        let e = &self.evds;
        let all = [&e.request, &e.recv, &e.conn];
        let mut out: smallvec::SmallVec<[&SoftEvd; 3]> = smallvec::SmallVec::new();
        for x in all {
            if let Some(s) = x.as_any().downcast_ref::<SoftEvd>() {
                if !out.iter().any(|o| std::ptr::eq(*o, s)) {
                    out.push(s);
                }
            }
        }
        out.into_iter()
    }

    pub(crate) fn push_conn(&self, ev: Event) {
        push(&self.evds.conn, ev);
    }

    /// Asks the IA's progress helper to look at this EP.
    pub(crate) fn kick(&self) {
        self.ia.engine.kick(&self.slot, &self.kick_pending);
    }

    /// A one-line picture of the endpoint's progress state (for diagnostics).
    pub(crate) fn progress_note(&self) -> String {
        let inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner()).len();
        let recvs = self.recvs.lock().unwrap_or_else(|e| e.into_inner()).len();
        let txq = self.tx.get().map_or(0, |t| t.queued());
        let txb = self.tx.get().map_or(0, |t| t.tx_bytes.load(Ordering::Relaxed));
        let rx = match self.rx.try_lock() {
            Ok(g) => g.as_ref().map_or("none".into(), |r| r.describe()),
            Err(_) => "busy".into(),
        };
        format!(
            "state={:?} inflight={inflight} recvs={recvs} txq={txq} tx_bytes={txb} rx=[{rx}] frames tx/rx={}/{} rx_done={} acked_sent={} acked_rcvd={} ack_due={:?} stalled={} active={} deep={} bg_polling={}",
            self.state(),
            self.frames[0].load(Ordering::Relaxed),
            self.frames[1].load(Ordering::Relaxed),
            self.rx_done.load(Ordering::SeqCst),
            self.acked_sent.load(Ordering::SeqCst),
            self.acked_rcvd.load(Ordering::SeqCst),
            self.ack_due.at().map(|d| d.saturating_duration_since(Instant::now())),
            self.stalled.load(Ordering::SeqCst),
            self.active.load(Ordering::SeqCst),
            self.handover.is_deep(),
            self.bg_polling.load(Ordering::SeqCst),
        )
    }
}

/// An endpoint of the TCP backend. Dropping the last handle disconnects.
pub struct TcpEp {
    pub(crate) sh: Arc<EpShared>,
}
