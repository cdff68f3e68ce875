//! OpenMP's work-sharing constructs across the processes of the job:
//! `parallel for` (each process takes a block of the range and runs it on
//! rayon's threads), `single`, `master`, and reductions.

use super::runtime::{Dsm, REDUCE_OFF, share};
use super::{DsmError, Result};
use rayon::prelude::*;
use rmr::{Cookie, DtoFlags, Sge};
use std::ops::Range;
use std::sync::atomic::Ordering;

/// How a reduction combines the processes' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum (for f64, added in rank order on every process, so every
    /// process gets the same bits).
    Sum,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
}

/// A value [`Dsm::reduce`] can combine: 8 bytes on the wire.
pub trait Reduce: Copy + Send + Sync + 'static {
    /// The value's 8 bytes.
    fn to_word(self) -> u64;
    /// The value from its 8 bytes.
    fn from_word(w: u64) -> Self;
    /// `a op b`.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

impl Reduce for f64 {
    fn to_word(self) -> u64 {
        self.to_bits()
    }
    fn from_word(w: u64) -> Self {
        f64::from_bits(w)
    }
    fn combine(op: ReduceOp, a: f64, b: f64) -> f64 {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

impl Reduce for i64 {
    fn to_word(self) -> u64 {
        self as u64
    }
    fn from_word(w: u64) -> Self {
        w as i64
    }
    fn combine(op: ReduceOp, a: i64, b: i64) -> i64 {
        match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }
    }
}

impl Dsm {
    /// This process's block of `range` (what [`Dsm::parallel_for`] runs here).
    pub fn share(&self, range: Range<usize>) -> Range<usize> {
        share(range, self.me, self.n)
    }

    /// Runs `f(i)` for this process's block of `range` on rayon's threads,
    /// then a [`Dsm::barrier`] (OpenMP's `parallel for`): after it, every
    /// process sees every write made in the loop.
    ///
    /// # Errors
    /// The first error `f` returned (the loop still ends in the barrier on
    /// every process, so no process is left waiting), or the barrier's
    /// (once a barrier failed, this process meets no more: see
    /// [`Dsm::barrier`]).
    pub fn parallel_for<F>(&self, range: Range<usize>, f: F) -> Result<()>
    where
        F: Fn(usize) -> Result<()> + Sync + Send,
    {
        let r = self.parallel_for_nowait(range, f);
        let b = self.barrier();
        r.and(b)
    }

    /// [`Dsm::parallel_for`] without the barrier (OpenMP's `nowait`): the
    /// writes reach other processes at this process's next release. The
    /// block's first and last index run after the others (a stencil's
    /// rows next to another process's block: their pages, prefetched,
    /// arrive meanwhile); no other order is promised.
    ///
    /// # Errors
    /// The first error `f` returned.
    pub fn parallel_for_nowait<F>(&self, range: Range<usize>, f: F) -> Result<()>
    where
        F: Fn(usize) -> Result<()> + Sync + Send,
    {
        let mine = self.share(range);
        // The block's first and last index run last: in a stencil they are
        // the ones that read the neighbours' data, whose pages then have
        // the block's run time to arrive (see `Dsm::prefetch`).
        let edges = match mine.len() {
            0 => Vec::new(),
            1 => vec![mine.start],
            _ => vec![mine.start, mine.end - 1],
        };
        let inner = mine.start + 1..mine.end.saturating_sub(1).max(mine.start + 1);
        if rayon::current_num_threads() <= 1 {
            // One thread: run the block here. A hop to rayon's single
            // worker would leave two threads of this process busy (the
            // worker spins a while after each block), on a node whose
            // other cores run the other processes.
            return inner.chain(edges).try_for_each(f);
        }
        inner.into_par_iter().try_for_each(&f)?;
        edges.into_par_iter().try_for_each(f)
    }

    /// Runs `f` on one process (rank 0), then a barrier on all (OpenMP's
    /// `single`): every process sees what `f` wrote.
    ///
    /// # Errors
    /// `f`'s error (on rank 0), or the barrier's.
    pub fn single(&self, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let r = if self.me == 0 { f() } else { Ok(()) };
        let b = self.barrier();
        r.and(b)
    }

    /// Runs `f` on rank 0 only, no barrier (OpenMP's `master`); returns
    /// `None` elsewhere.
    ///
    /// # Errors
    /// `f`'s error.
    pub fn master<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<Option<R>> {
        if self.me == 0 { f().map(Some) } else { Ok(None) }
    }

    /// Combines every process's `v` with `op` and returns the result on
    /// every process (a collective, and a [`Dsm::barrier`]). Each process
    /// RDMA-writes its value into its slot at rank 0, the barrier makes them
    /// all land, and each reads the slots back and combines them in rank
    /// order: every process gets the same bits. Slots alternate between two
    /// rounds, so the next reduction never overwrites a slot someone is
    /// still reading.
    ///
    /// # Errors
    /// A failed write, read or barrier.
    pub fn reduce<T: Reduce>(&self, op: ReduceOp, v: T) -> Result<T> {
        let round = self.reductions.fetch_add(1, Ordering::Relaxed) % 2;
        let area = REDUCE_OFF + round * 8 * self.n as u64;
        let mine = area + 8 * self.me as u64;
        // The value goes out of this process's scratch copy of its slot.
        self.cache.write(mine, &v.to_word().to_le_bytes())?;
        let ep = self.mesh.ep(0)?;
        let sge = [Sge::new(&*self.cache_lmr, mine, 8)];
        self.mesh.run(|c| {
            ep.post_rdma_write(&sge, self.ctxs[0].at(mine), Cookie(c), DtoFlags::empty())
        })?;
        self.barrier()?;
        let all = [Sge::new(&*self.cache_lmr, area, 8 * self.n as u64)];
        self.mesh.run(|c| {
            ep.post_rdma_read(&all, self.ctxs[0].at(area), Cookie(c), DtoFlags::empty())
        })?;
        let mut b = vec![0u8; 8 * self.n];
        self.cache.read(area, &mut b)?;
        let mut vals =
            b.chunks_exact(8).map(|c| T::from_word(u64::from_le_bytes(c.try_into().expect("8"))));
        let first =
            vals.next().ok_or_else(|| DsmError::Protocol("no process in the job".into()))?;
        Ok(vals.fold(first, |a, x| T::combine(op, a, x)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_words_and_combine() {
        for v in [0.0, -1.5, f64::MAX, f64::MIN_POSITIVE] {
            assert_eq!(f64::from_word(v.to_word()).to_bits(), v.to_bits());
        }
        for v in [0i64, -1, i64::MIN, i64::MAX] {
            assert_eq!(i64::from_word(v.to_word()), v);
        }
        assert_eq!(f64::combine(ReduceOp::Sum, 1.5, 2.0), 3.5);
        assert_eq!(i64::combine(ReduceOp::Min, -3, 2), -3);
        assert_eq!(i64::combine(ReduceOp::Max, -3, 2), 2);
        assert_eq!(i64::combine(ReduceOp::Sum, i64::MAX, 1), i64::MIN);
    }
}
