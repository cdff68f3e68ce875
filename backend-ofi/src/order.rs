//! Writes that rode in messages (see [`crate::eager`]), ordered with the
//! RDMA operations posted after them.
//!
//! The peer's provider serves a later RDMA read, write or atomic of the
//! same endpoint as it takes it in, possibly before the peer's rmr has
//! read the earlier message and placed the writes that rode in it: a read
//! of those bytes would see them stale, a later write to them would be
//! overwritten. So the writer keeps the writes that rode and are not yet
//! known placed (their target and their number), and:
//! - the peer acknowledges what it placed in the header of its next
//!   message ([`crate::eager::T_ACK`]), and keeps the number in its
//!   control words as well;
//! - a write overlapping an unacknowledged ride is not held (it could be
//!   posted alone);
//! - before an RDMA operation whose target overlaps an unacknowledged
//!   ride (checked under the transmit lock it is posted under), the
//!   writer reads the peer's control words (an RDMA read, served after
//!   the message, so it sees the number once rmr placed it) until the
//!   ride is acknowledged: the post waits for the peer, [`CONFIRM_FOR`]
//!   at most (then `Error::Timeout`);
//! - one thread of the endpoint reads the peer's number at a time (the
//!   reads land in one control word);
//! - rides are told apart by key: the same bytes registered twice, under
//!   two keys, are not ordered across them;
//! - about [`RIDES_MAX`] rides at most wait for acknowledgement (checked
//!   before a write rides, not under the lock it rides under): beyond,
//!   writes go alone.
//!
//! Messages keep their order among themselves, so rides need nothing
//! against each other or against later messages.

use crate::dto::{TxKind, TxState};
use crate::ep::EpShared;
use crate::msg::Remote;
use rmr_api::{Error, Result};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A write that rode in a message, not yet known placed by the peer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ride {
    key: u64,
    addr: u64,
    len: u64,
    /// The write's number (the low 32 bits of its sequence number).
    id: u32,
}

/// Rides that wait for acknowledgement at most.
pub(crate) const RIDES_MAX: usize = 64;
/// Where an endpoint's control words hold the number of the last write
/// of the peer it placed (the peer reads it).
pub(crate) const PLACED_AT: u64 = 64;
/// Where a read of the peer's number lands.
const PROBE_AT: u64 = 72;
/// Marks a number as set.
const SET: u64 = 1 << 63;
/// How long an operation waits for the rides it overlaps.
const CONFIRM_FOR: Duration = Duration::from_secs(10);

fn overlaps(x: &Ride, r: &Remote) -> bool {
    x.key == r.key
        && x.addr < r.addr.saturating_add(r.len.max(1))
        && r.addr < x.addr.saturating_add(x.len)
}

/// Whether number `a` is at or before `b` (32-bit, wrapping).
fn upto(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) >= 0
}

/// Whether another write may ride (fewer than [`RIDES_MAX`] wait).
pub(crate) fn room(tx: &TxState) -> bool {
    tx.rides.len() < RIDES_MAX
}

/// Whether a write to `r` may be held: another may ride, and none that
/// waits overlaps it (a held write may be posted alone).
pub(crate) fn may_hold(tx: &TxState, r: &Remote) -> bool {
    room(tx) && !tx.rides.iter().any(|x| overlaps(x, r))
}

/// Whether a ride waiting for acknowledgement overlaps `r`.
pub(crate) fn overlapping(tx: &TxState, r: &Remote) -> bool {
    tx.rides.iter().any(|x| overlaps(x, r))
}

/// Notes that the write to `r` numbered `seq` rode in a message.
pub(crate) fn rode(tx: &mut TxState, r: Remote, seq: u64) {
    tx.rides.push_back(Ride { key: r.key, addr: r.addr, len: r.len, id: seq as u32 });
}

impl EpShared {
    /// The peer's writes that rode in messages are placed up to the one
    /// numbered `id` (this side's acknowledgement to send, and the number
    /// the peer may read).
    pub(crate) fn placed(&self, id: u64) {
        let v = SET | (id & 0xffff_ffff);
        self.placed.store(v, Ordering::Release);
        let _ = self.ctl.store_u64(PLACED_AT, v);
    }

    /// The acknowledgement due in this side's next message, if any.
    pub(crate) fn ack_due(&self) -> Option<u64> {
        let p = self.placed.load(Ordering::Acquire);
        (p & SET != 0 && p != self.acked.load(Ordering::Relaxed)).then_some(p)
    }

    /// A message carried the acknowledgement `p`.
    pub(crate) fn ack_sent(&self, p: u64) {
        self.acked.store(p, Ordering::Relaxed);
    }

    /// The peer placed this side's riding writes up to the one numbered
    /// `id`.
    pub(crate) fn confirmed(&self, id: u64) {
        let id = id as u32;
        let mut tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.rides.retain(|x| !upto(x.id, id));
    }

    /// Waits until no ride overlaps `r`, reading the peer's number.
    pub(crate) fn confirm(&self, r: &Remote) -> Result<()> {
        let deadline = Instant::now() + CONFIRM_FOR;
        loop {
            let waits = overlapping(&self.tx.lock().unwrap_or_else(|e| e.into_inner()), r);
            if !waits {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout);
            }
            let v = self.probe(deadline)?;
            if v & SET != 0 {
                self.confirmed(v);
            }
        }
    }

    /// Reads the peer's number of the last write of ours it placed,
    /// waiting for the read until `by`. One thread at a time: each read
    /// lands in the same control word, which another read in flight could
    /// be writing while this one loads it.
    fn probe(&self, by: Instant) -> Result<u64> {
        let _one = self.probing.lock().unwrap_or_else(|e| e.into_inner());
        // (Another thread's probe may have held it up to its deadline.)
        if Instant::now() > by {
            return Err(Error::Timeout);
        }
        let peer = self.lock_conn().peer_ctl;
        let Some((key, addr)) = peer else { return Err(self.not_connected()) };
        let r = Remote { addr: addr + PLACED_AT, len: 8, key };
        self.post_ctl(r, PROBE_AT as usize, TxKind::Probe)?;
        // Until every read posted so far completed (one that an earlier
        // probe gave up on included): none writes the word as it is read.
        let posted = {
            let mut c = self.lock_conn();
            c.probes_posted += 1;
            c.probes_posted
        };
        let mut spins = 0u32;
        while self.lock_conn().probes < posted {
            if Instant::now() > by {
                return Err(Error::Timeout);
            }
            if self.state() != rmr_api::EpState::Connected {
                return Err(self.not_connected());
            }
            // A read takes a round trip: look without sleeping first (a
            // progress thread may take its completion meanwhile).
            spins += 1;
            let block = if spins < 2000 { Duration::ZERO } else { Duration::from_millis(1) };
            if !self.req.progress(block) {
                std::thread::yield_now();
            }
        }
        self.ctl.load_u64(PROBE_AT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rides_overlap_by_key_and_range_and_numbers_wrap() {
        let x = Ride { key: 7, addr: 100, len: 8, id: 5 };
        let r = |key, addr, len| Remote { key, addr, len };
        assert!(overlaps(&x, &r(7, 100, 8)));
        assert!(overlaps(&x, &r(7, 107, 1)));
        assert!(overlaps(&x, &r(7, 96, 5)));
        assert!(!overlaps(&x, &r(7, 108, 8)));
        assert!(!overlaps(&x, &r(7, 92, 8)));
        assert!(!overlaps(&x, &r(8, 100, 8)), "another key");
        assert!(overlaps(&x, &r(7, 104, 0)), "an empty access at a ridden byte");
        assert!(upto(5, 5) && upto(5, 6) && !upto(6, 5));
        assert!(upto(u32::MAX, 2), "numbers wrap");
        assert!(!upto(2, u32::MAX));
    }
}
