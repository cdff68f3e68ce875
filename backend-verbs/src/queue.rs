//! Send- and receive-queue bookkeeping (pure): which posted WRs are still
//! owned by the HCA, when a suppressed WR must be signalled anyway, and
//! which user completions a work completion stands for.
//!
//! On an RC QP completions arrive in posting order, so a completion for WR
//! `n` retires every unsignalled WR before it (they succeeded: errors always
//! produce their own completion). Back-pressure is a value: a full queue is
//! [`Error::QueueFull`].

use rmr_api::{DtoOp, Error, Result, Status};
use std::collections::VecDeque;

/// A reservation for one send WR, valid until the matching `commit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// Sequence number (goes into the `wr_id`).
    pub seq: u64,
    /// Whether to set `IBV_SEND_SIGNALED`.
    pub signalled: bool,
}

/// A send WR the HCA still owns.
#[derive(Debug)]
pub struct Pending<X> {
    seq: u64,
    cookie: u64,
    op: DtoOp,
    bytes: u64,
    report: bool,
    extra: X,
}

/// A user-visible completion produced by the tracker.
#[derive(Debug, PartialEq, Eq)]
pub struct Done<X> {
    /// The user's cookie.
    pub cookie: u64,
    /// The operation.
    pub op: DtoOp,
    /// How it ended.
    pub status: Status,
    /// Bytes moved.
    pub bytes: u64,
    /// What the poster attached (an atomic's result buffer, an internal marker).
    pub extra: X,
    /// False for a suppressed WR that succeeded (no event is due).
    pub report: bool,
}

/// The send queue of one QP.
#[derive(Debug)]
pub struct SendTracker<X> {
    depth: usize,
    period: u32,
    since_signal: u32,
    next_seq: u64,
    q: VecDeque<Pending<X>>,
}

impl<X> SendTracker<X> {
    /// A queue of `depth` WRs, signalling at least every `period`-th one.
    pub fn new(depth: u32, period: u32) -> Self {
        SendTracker {
            depth: depth.max(1) as usize,
            period: period.max(1),
            since_signal: 0,
            next_seq: 0,
            q: VecDeque::with_capacity(depth as usize),
        }
    }

    /// WRs the HCA still owns.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True when no WR is outstanding.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Reserves a slot. `want_event` is false for SUPPRESS; such a WR is still
    /// signalled when `period` unsignalled WRs precede it or when it takes
    /// the last free slot, so a full queue always drains.
    ///
    /// # Errors
    /// [`Error::QueueFull`].
    pub fn begin(&self, want_event: bool) -> Result<Ticket> {
        if self.q.len() >= self.depth {
            return Err(Error::QueueFull);
        }
        let signalled =
            want_event || self.since_signal + 1 >= self.period || self.q.len() + 1 == self.depth;
        Ok(Ticket { seq: self.next_seq, signalled })
    }

    /// Records a WR that `ibv_post_send` accepted.
    pub fn commit(
        &mut self,
        t: Ticket,
        cookie: u64,
        op: DtoOp,
        bytes: u64,
        report: bool,
        extra: X,
    ) {
        debug_assert_eq!(t.seq, self.next_seq);
        self.next_seq += 1;
        self.since_signal = if t.signalled { 0 } else { self.since_signal + 1 };
        self.q.push_back(Pending { seq: t.seq, cookie, op, bytes, report, extra });
    }

    /// The operation of WR `seq`, if it is outstanding (to map a failed
    /// completion's status before calling [`SendTracker::complete`]).
    pub fn op_of(&self, seq: u64) -> Option<DtoOp> {
        let front = self.q.front()?.seq;
        self.q.get(seq.checked_sub(front)? as usize).map(|p| p.op)
    }

    /// Retires every WR up to and including `seq`; returns the ones that
    /// completed (earlier ones with success). Unknown `seq`s retire nothing.
    pub fn complete(&mut self, seq: u64, status: Status) -> Vec<Done<X>> {
        let mut out = Vec::new();
        if seq >= self.next_seq || self.q.front().is_none_or(|p| p.seq > seq) {
            return out;
        }
        while let Some(p) = self.q.pop_front() {
            let last = p.seq == seq;
            let st = if last { status } else { Status::Success };
            out.push(Done {
                cookie: p.cookie,
                op: p.op,
                status: st,
                bytes: p.bytes,
                extra: p.extra,
                report: p.report || !st.is_ok(),
            });
            if last {
                break;
            }
        }
        out
    }
}

/// The receive queue of one QP (every receive is signalled).
#[derive(Debug)]
pub struct RecvTracker {
    depth: usize,
    next_seq: u64,
    q: VecDeque<(u64, u64)>,
}

impl RecvTracker {
    /// A queue of `depth` receives.
    pub fn new(depth: u32) -> Self {
        RecvTracker { depth: depth.max(1) as usize, next_seq: 0, q: VecDeque::new() }
    }

    /// Receives posted and not completed.
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// True when no receive is posted.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Reserves the next sequence number.
    ///
    /// # Errors
    /// [`Error::QueueFull`].
    pub fn begin(&self) -> Result<u64> {
        if self.q.len() >= self.depth {
            return Err(Error::QueueFull);
        }
        Ok(self.next_seq)
    }

    /// Records a posted receive.
    pub fn commit(&mut self, seq: u64, cookie: u64) {
        debug_assert_eq!(seq, self.next_seq);
        self.next_seq += 1;
        self.q.push_back((seq, cookie));
    }

    /// The cookie of completed receive `seq` (receives complete in order).
    pub fn complete(&mut self, seq: u64) -> Option<u64> {
        if self.q.front().is_none_or(|&(s, _)| s > seq) {
            return None;
        }
        while let Some((s, cookie)) = self.q.pop_front() {
            if s == seq {
                return Some(cookie);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(t: &mut SendTracker<()>, cookie: u64, want: bool) -> Ticket {
        let k = t.begin(want).unwrap();
        t.commit(k, cookie, DtoOp::RdmaWrite, 10, want, ());
        k
    }

    #[test]
    fn suppressed_wrs_are_retired_by_a_later_completion() {
        let mut t = SendTracker::new(64, 100);
        let ks: Vec<Ticket> = (0..10).map(|i| post(&mut t, i, false)).collect();
        assert!(ks.iter().all(|k| !k.signalled));
        let last = post(&mut t, 99, true);
        assert!(last.signalled);
        let done = t.complete(last.seq, Status::Success);
        assert_eq!(done.len(), 11);
        let reported: Vec<u64> = done.iter().filter(|d| d.report).map(|d| d.cookie).collect();
        assert_eq!(reported, vec![99]);
        assert!(t.is_empty());
    }

    #[test]
    fn periodic_and_last_slot_signalling_keep_the_queue_draining() {
        let mut t = SendTracker::new(8, 3);
        let sig: Vec<bool> = (0..8).map(|i| post(&mut t, i, false).signalled).collect();
        assert_eq!(sig, [false, false, true, false, false, true, false, true]);
        assert!(matches!(t.begin(false), Err(Error::QueueFull)));
        // Retiring up to the first signalled WR frees three slots.
        assert_eq!(t.complete(2, Status::Success).len(), 3);
        assert_eq!(t.len(), 5);
        assert!(t.begin(false).is_ok());
    }

    #[test]
    fn errors_of_suppressed_wrs_are_reported_and_flushes_follow() {
        let mut t = SendTracker::new(16, 100);
        for i in 0..4 {
            post(&mut t, i, false);
        }
        assert_eq!(t.op_of(2), Some(DtoOp::RdmaWrite));
        assert_eq!(t.op_of(9), None);
        let d = t.complete(1, Status::RemoteAccess);
        assert_eq!(d.len(), 2);
        assert!(!d[0].report && d[0].status.is_ok());
        assert!(d[1].report && d[1].status == Status::RemoteAccess && d[1].cookie == 1);
        let d = t.complete(2, Status::Flushed);
        assert_eq!((d.len(), d[0].report, d[0].status), (1, true, Status::Flushed));
        // Stale and future ids retire nothing.
        assert!(t.complete(1, Status::Success).is_empty());
        assert!(t.complete(77, Status::Success).is_empty());
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn receives_complete_in_order_and_the_queue_is_bounded() {
        let mut r = RecvTracker::new(2);
        let a = r.begin().unwrap();
        r.commit(a, 10);
        let b = r.begin().unwrap();
        r.commit(b, 11);
        assert!(matches!(r.begin(), Err(Error::QueueFull)));
        assert_eq!(r.complete(a), Some(10));
        assert_eq!(r.complete(a), None);
        assert_eq!(r.complete(b), Some(11));
        assert!(r.is_empty());
    }
}
