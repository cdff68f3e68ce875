//! The demo computation: 2D Jacobi heat diffusion on a grid in shared
//! memory. The left edge is held at 100 degrees, the other edges at 0; each
//! iteration sets every inner point to the mean of its four neighbours, so
//! every row warms from its left end and each iteration changes a short run
//! of bytes per row — what diffs carry home instead of whole pages.
//!
//! Rows are 500 doubles (4000 bytes), each laid on a page of its own (as a
//! DSM program pads its data): the row next to a process's block, which it
//! reads from its neighbour every iteration, is then one page. Row r of the
//! two grids (old and new) lie side by side, so a process's rows live
//! mostly in the pages homed at it; where a block and the pages homed at
//! its process do not line up (with 4 processes in `examples/tests/dsm.rs`,
//! say), the rows written away
//! from home go there as diffs. (Pages written by two processes at once,
//! whose diffs merge at home, are rmr-dsm's litmus tests' false-sharing
//! case.) [`reference()`] is the same computation in one process, for the
//! bit-for-bit check.

use super::{Dsm, Result};
use std::time::{Duration, Instant};

/// Doubles per row (4000 bytes; each row starts a page, see the module docs).
pub const COLS: usize = 500;

/// The grid's shape.
#[derive(Clone, Copy, Debug)]
pub struct Grid {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl Grid {
    /// Bytes of one grid.
    pub fn bytes(&self) -> usize {
        self.rows * self.stride() * 8
    }

    /// Elements from one row's start to the next's in shared memory: whole
    /// pages ([`rmr_dsm::PAGE`]), so that the row next to a process's
    /// block, which it reads from its neighbour, is one page of the
    /// neighbour's, not two.
    fn stride(&self) -> usize {
        self.cols.next_multiple_of(rmr_dsm::PAGE / 8)
    }

    /// Shared bytes the computation needs (two grids, on a page boundary).
    pub fn shared_bytes(&self) -> usize {
        2 * self.bytes() + super::PAGE_SLACK
    }

    fn initial(&self, _r: usize) -> Vec<f64> {
        let mut row = vec![0.0; self.cols];
        row[0] = 100.0;
        row
    }
}

/// One new row from three old ones (the single place the formula lives,
/// so both versions compute bit-identical values).
fn relax(up: &[f64], mid: &[f64], down: &[f64], out: &mut [f64]) {
    let c = mid.len();
    out[0] = mid[0];
    out[c - 1] = mid[c - 1];
    for j in 1..c - 1 {
        out[j] = 0.25 * (up[j] + down[j] + mid[j - 1] + mid[j + 1]);
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct HeatRun {
    /// Iterations done.
    pub iters: usize,
    /// The final grid (rank 0 only; empty elsewhere).
    pub grid: Vec<f64>,
    /// Wall time per iteration.
    pub per_iter: Duration,
}

/// Runs `iters` Jacobi iterations in shared memory.
///
/// # Errors
/// Runtime failures.
pub fn run(dsm: &Dsm, g: Grid, iters: usize) -> Result<HeatRun> {
    // Row r of both grids side by side: a process's block of rows is then
    // (about) the block of pages homed at it, so it mostly works at home.
    let stride = g.stride();
    let grids = dsm.alloc::<f64>(2 * g.rows * stride)?;
    let at = |k: usize, r: usize| (2 * r + k) * stride;
    // Each process fills its block of rows of both grids.
    dsm.parallel_for(0..g.rows, |r| {
        let row = g.initial(r);
        grids.write(at(0, r), &row)?;
        grids.write(at(1, r), &row)
    })?;
    let start = Instant::now();
    for it in 0..iters {
        let (src, dst) = (it % 2, (it + 1) % 2);
        // The rows next to this process's block live at its neighbours:
        // start fetching them now, while the neighbours are still in the
        // barrier's runtime, rather than when the loop reaches them (the
        // source grid's rows only: one page each).
        let mine = dsm.share(1..g.rows - 1);
        if !mine.is_empty() {
            let row = |r: usize| at(src, r)..at(src, r) + g.cols;
            grids.prefetch(row(mine.start - 1))?;
            grids.prefetch(row(mine.end))?;
        }
        dsm.parallel_for(1..g.rows - 1, |r| {
            let mut three = vec![0.0; 3 * g.cols];
            for (k, row) in three.chunks_mut(g.cols).enumerate() {
                grids.read(at(src, r + k - 1), row)?;
            }
            let (up, rest) = three.split_at(g.cols);
            let (mid, down) = rest.split_at(g.cols);
            let mut out = vec![0.0; g.cols];
            relax(up, mid, down, &mut out);
            grids.write(at(dst, r), &out)
        })?;
    }
    let per_iter = start.elapsed() / iters.max(1) as u32;
    let mut grid = Vec::new();
    if dsm.rank() == 0 {
        grid = vec![0.0; g.rows * g.cols];
        for (r, row) in grid.chunks_mut(g.cols).enumerate() {
            grids.read(at(iters % 2, r), row)?;
        }
    }
    dsm.barrier()?;
    Ok(HeatRun { iters, grid, per_iter })
}

/// The same computation in one process, on a plain vector.
pub fn reference(g: Grid, iters: usize) -> Vec<f64> {
    let mut a: Vec<f64> = (0..g.rows).flat_map(|r| g.initial(r)).collect();
    let mut b = a.clone();
    for _ in 0..iters {
        for r in 1..g.rows - 1 {
            let (up, rest) = a[(r - 1) * g.cols..].split_at(g.cols);
            let (mid, rest) = rest.split_at(g.cols);
            let down = &rest[..g.cols];
            relax(up, mid, down, &mut b[r * g.cols..(r + 1) * g.cols]);
        }
        std::mem::swap(&mut a, &mut b);
    }
    a
}

/// A checksum of a grid's exact bits (FNV-1a).
pub fn checksum(grid: &[f64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in grid {
        for b in v.to_bits().to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_diffuses_heat_from_the_left() {
        let g = Grid { rows: 16, cols: 8 };
        let out = reference(g, 50);
        // Held edges stay; inner points warm up, nearer the hot edge more.
        assert_eq!(out[5 * 8], 100.0);
        assert_eq!(out[5 * 8 + 7], 0.0);
        assert_eq!(out[3], 0.0);
        assert!(out[5 * 8 + 1] > out[5 * 8 + 2] && out[5 * 8 + 2] > 0.0);
    }
}
