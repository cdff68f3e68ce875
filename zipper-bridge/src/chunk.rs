//! Chunk bookkeeping with no IO: how an operation is cut into chunks, how
//! a bridge tracks the chunks of each client operation until they have
//! landed on the far side (and what it may acknowledge), and how a client
//! releases its operations' completions in posting order.

use rmr_api::Status;
use std::collections::VecDeque;

/// Cuts `total` bytes into `(offset, len)` chunks of at most `chunk` bytes;
/// an empty operation is one empty chunk.
pub fn chunks(total: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    let chunk = chunk.max(1);
    let n = total.div_ceil(chunk).max(1);
    (0..n).map(move |i| {
        let off = i * chunk;
        (off, (total - off.min(total)).min(chunk))
    })
}

#[derive(Clone, Copy, Debug)]
struct Track {
    id: u64,
    outstanding: u32,
    last_seen: bool,
    signalled: bool,
    status: Status,
}

/// A bridge's view of one client's operations: chunks arrive in order,
/// are forwarded, and complete (in any order); an operation is done when
/// its last chunk has arrived and every chunk has completed. Done
/// operations are acknowledged cumulatively, failures one by one.
#[derive(Debug, Default)]
pub struct OpTracker {
    ops: VecDeque<Track>,
    /// Every op below this id is done and acknowledged-able.
    done_below: u64,
    errors: VecDeque<(u64, Status)>,
    signalled_done: bool,
    /// Highest ack already sent.
    sent_ack: u64,
}

impl OpTracker {
    /// A chunk of operation `id` arrived (ids arrive in non-decreasing order).
    ///
    /// # Errors
    /// A message when `id` goes backwards (a protocol violation).
    pub fn arrived(&mut self, id: u64, last: bool, signalled: bool) -> Result<(), String> {
        match self.ops.back_mut() {
            Some(t) if t.id == id && !t.last_seen => {
                t.outstanding += 1;
                t.last_seen = last;
                t.signalled |= signalled;
                return Ok(());
            }
            Some(t) if t.id >= id => return Err(format!("operation id {id} after {}", t.id)),
            None if id < self.done_below => {
                return Err(format!("operation id {id} below {}", self.done_below));
            }
            _ => {}
        }
        self.ops.push_back(Track {
            id,
            outstanding: 1,
            last_seen: last,
            signalled,
            status: Status::Success,
        });
        Ok(())
    }

    /// A chunk of `id` completed with `status` on the far side.
    pub fn chunk_done(&mut self, id: u64, status: Status) {
        if let Some(t) = self.ops.iter_mut().find(|t| t.id == id) {
            t.outstanding = t.outstanding.saturating_sub(1);
            if t.status.is_ok() && !status.is_ok() {
                t.status = status;
            }
        }
        while let Some(t) = self.ops.front() {
            if !(t.last_seen && t.outstanding == 0) {
                break;
            }
            let t = self.ops.pop_front().expect("front");
            if !t.status.is_ok() {
                self.errors.push_back((t.id, t.status));
            }
            self.signalled_done |= t.signalled || !t.status.is_ok();
            self.done_below = t.id + 1;
        }
    }

    /// True when a completion the client waits for is not yet acknowledged.
    pub fn urgent(&self) -> bool {
        self.signalled_done || !self.errors.is_empty()
    }

    /// True when nothing is in flight.
    pub fn idle(&self) -> bool {
        self.ops.is_empty()
    }

    /// Operations forwarded but not yet done.
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    /// What the next outgoing header acknowledges: `(ack, error)`. The
    /// cumulative ack never passes a failure not yet reported (the error
    /// rides in the same header, and the client handles it first).
    pub fn header_acks(&mut self) -> (u64, Option<(u64, Status)>) {
        let err = self.errors.pop_front();
        let ack = match self.errors.front() {
            Some(&(id, _)) => id.min(self.done_below),
            None => self.done_below,
        };
        if self.errors.is_empty() {
            self.signalled_done = false;
        }
        self.sent_ack = self.sent_ack.max(ack);
        (ack, err)
    }

    /// Fails every operation still in flight (the far side is gone);
    /// returns how many.
    pub fn fail_all(&mut self, status: Status) -> usize {
        let n = self.ops.len();
        for t in &mut self.ops {
            t.outstanding = 0;
            t.last_seen = true;
            t.status = status;
        }
        if let Some(id) = self.ops.front().map(|t| t.id) {
            self.chunk_done(id, status);
        }
        n
    }
}

/// What a client knows of an operation it posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOp<K> {
    /// Operation id.
    pub id: u64,
    /// The user's cookie.
    pub cookie: u64,
    /// What it was (the caller's type).
    pub kind: K,
    /// Whether the user wants an event on success.
    pub signalled: bool,
    /// Bytes.
    pub bytes: u64,
    /// Outcome.
    pub status: Status,
}

/// A client's operations in flight, released in posting order as the
/// bridge acknowledges them.
#[derive(Debug)]
pub struct ClientOps<K> {
    ops: VecDeque<ClientOp<K>>,
    next_id: u64,
    max: usize,
}

impl<K: Copy> ClientOps<K> {
    /// At most `max` operations in flight.
    pub fn new(max: usize) -> Self {
        ClientOps { ops: VecDeque::new(), next_id: 0, max: max.max(1) }
    }

    /// True when another operation fits.
    pub fn has_room(&self) -> bool {
        self.ops.len() < self.max
    }

    /// Operations in flight.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Records a new operation; returns its id.
    pub fn push(&mut self, cookie: u64, kind: K, signalled: bool, bytes: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.ops.push_back(ClientOp {
            id,
            cookie,
            kind,
            signalled,
            bytes,
            status: Status::Success,
        });
        id
    }

    /// The operation `id`, if still in flight.
    pub fn get(&self, id: u64) -> Option<&ClientOp<K>> {
        let front = self.ops.front()?.id;
        self.ops.get(id.checked_sub(front)? as usize)
    }

    /// Operation `id` failed with `status`.
    pub fn fail(&mut self, id: u64, status: Status) {
        if let Some(front) = self.ops.front().map(|o| o.id) {
            if let Some(o) = id.checked_sub(front).and_then(|i| self.ops.get_mut(i as usize)) {
                if o.status.is_ok() {
                    o.status = status;
                }
            }
        }
    }

    /// Every operation below `ack` is done: pops them, in order, for the
    /// caller to report (successful suppressed ones included: it decides).
    pub fn ack(&mut self, ack: u64, out: &mut Vec<ClientOp<K>>) {
        while self.ops.front().is_some_and(|o| o.id < ack) {
            out.push(self.ops.pop_front().expect("front"));
        }
    }

    /// Fails and pops everything (the connection is gone).
    pub fn fail_all(&mut self, status: Status, out: &mut Vec<ClientOp<K>>) {
        for mut o in self.ops.drain(..) {
            if o.status.is_ok() {
                o.status = status;
            }
            out.push(o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn chunking() {
        assert_eq!(chunks(0, 64).collect::<Vec<_>>(), vec![(0, 0)]);
        assert_eq!(chunks(64, 64).collect::<Vec<_>>(), vec![(0, 64)]);
        assert_eq!(chunks(65, 64).collect::<Vec<_>>(), vec![(0, 64), (64, 1)]);
    }

    #[test]
    fn errors_hold_the_cumulative_ack() {
        let mut t = OpTracker::default();
        for id in 0..3 {
            t.arrived(id, true, false).unwrap();
        }
        t.chunk_done(1, Status::BadKey);
        assert_eq!(t.header_acks(), (0, None), "op 0 still in flight");
        t.chunk_done(0, Status::Success);
        t.chunk_done(2, Status::Success);
        assert!(t.urgent());
        assert_eq!(t.header_acks(), (3, Some((1, Status::BadKey))));
        assert!(!t.urgent());
        assert!(t.arrived(1, true, false).is_err());
    }

    proptest! {
        /// Ops of random chunk counts, chunks completing in random order:
        /// the ack only ever covers fully completed ops, ends covering all,
        /// and every failure is reported exactly once, before the ack passes it.
        #[test]
        fn tracker_acks_exactly_the_done_prefix(
            sizes in proptest::collection::vec(1u32..5, 1..30),
            order in proptest::collection::vec(any::<u16>(), 0..200),
            fail_at in proptest::collection::vec(any::<bool>(), 30),
        ) {
            let mut t = OpTracker::default();
            let mut pending: Vec<(u64, u32)> = Vec::new();
            for (id, &n) in sizes.iter().enumerate() {
                for c in 0..n {
                    t.arrived(id as u64, c + 1 == n, false).unwrap();
                    pending.push((id as u64, c));
                }
            }
            let mut left = vec![0u32; sizes.len()];
            for (i, &n) in sizes.iter().enumerate() { left[i] = n; }
            let mut oi = order.into_iter();
            let mut reported = std::collections::BTreeSet::new();
            let mut last_ack = 0;
            while !pending.is_empty() {
                let k = oi.next().map_or(0, usize::from) % pending.len();
                let (id, _) = pending.swap_remove(k);
                let st = if fail_at[id as usize] { Status::RemoteAccess } else { Status::Success };
                t.chunk_done(id, st);
                left[id as usize] -= 1;
                let (ack, err) = t.header_acks();
                if let Some((e, _)) = err {
                    prop_assert!(fail_at[e as usize]);
                    prop_assert!(reported.insert(e), "reported twice");
                }
                prop_assert!(ack >= last_ack);
                last_ack = ack;
                for id in 0..ack {
                    prop_assert_eq!(left[id as usize], 0, "acked before done");
                    if fail_at[id as usize] {
                        prop_assert!(reported.contains(&id), "ack passed an unreported failure");
                    }
                }
            }
            loop {
                let (ack, err) = t.header_acks();
                if let Some((e, _)) = err { prop_assert!(reported.insert(e)); }
                last_ack = ack;
                if err.is_none() { break; }
            }
            prop_assert_eq!(last_ack, sizes.len() as u64);
            prop_assert!(t.idle());
        }

        #[test]
        fn client_ops_release_in_order(n in 1usize..50, acks in proptest::collection::vec(0u64..60, 1..20)) {
            let mut ops = ClientOps::new(64);
            for i in 0..n { ops.push(i as u64 * 10, (), i % 2 == 0, 1); }
            let mut out = Vec::new();
            for a in acks { ops.ack(a, &mut out); }
            ops.fail_all(Status::Broken, &mut out);
            let ids: Vec<u64> = out.iter().map(|o| o.id).collect();
            prop_assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
        }
    }
}
