//! The second demo kernel: repeated dense matrix-vector products,
//! `x <- A x / n` on an n x n matrix in shared memory. Each process owns a
//! block of rows of `A` (filled where they live) and computes that block of
//! the next `x` from a local copy of the current one (one read of the
//! whole vector: every page of it fetched at once). [`reference()`] is the
//! same computation in one process, for the bit-for-bit check.

use super::{Dsm, Result};
use std::time::{Duration, Instant};

/// Element (i, j) of the matrix: deterministic, mixed signs, no two rows alike.
fn a(i: usize, j: usize) -> f64 {
    let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (j as u64).wrapping_mul(0xc2b2_ae3d);
    ((h >> 11) % 2001) as f64 / 1000.0 - 1.0
}

/// One row's dot product with `x` (the single place the sum is written,
/// so both versions add in the same order and agree bit for bit).
fn row_dot(row: &[f64], x: &[f64]) -> f64 {
    row.iter().zip(x).fold(0.0, |s, (a, b)| s + a * b)
}

/// What a run produced.
#[derive(Debug)]
pub struct MatvecRun {
    /// The final vector (rank 0 only; empty elsewhere).
    pub x: Vec<f64>,
    /// Wall time per product.
    pub per_iter: Duration,
}

/// Shared bytes the computation needs for an `n` x `n` matrix.
pub fn shared_bytes(n: usize) -> usize {
    (n * n + 2 * n) * 8 + 3 * crate::dsm::PAGE_SLACK
}

/// Runs `iters` products on an `n` x `n` matrix in shared memory.
///
/// # Errors
/// Runtime failures.
pub fn run(dsm: &Dsm, n: usize, iters: usize) -> Result<MatvecRun> {
    let m = dsm.alloc::<f64>(n * n)?;
    let xs = [dsm.alloc::<f64>(n)?, dsm.alloc::<f64>(n)?];
    dsm.parallel_for(0..n, |i| {
        let row: Vec<f64> = (0..n).map(|j| a(i, j)).collect();
        m.write(i * n, &row)?;
        xs[0].set(i, 1.0)
    })?;
    let start = Instant::now();
    for it in 0..iters {
        let (src, dst) = (xs[it % 2], xs[(it + 1) % 2]);
        let x = src.to_vec(0..n)?;
        dsm.parallel_for(0..n, |i| {
            let row = m.to_vec(i * n..(i + 1) * n)?;
            dst.set(i, row_dot(&row, &x) / n as f64)
        })?;
    }
    let per_iter = start.elapsed() / iters.max(1) as u32;
    let x = if dsm.rank() == 0 { xs[iters % 2].to_vec(0..n)? } else { Vec::new() };
    dsm.barrier()?;
    Ok(MatvecRun { x, per_iter })
}

/// The same computation in one process.
pub fn reference(n: usize, iters: usize) -> Vec<f64> {
    let m: Vec<f64> = (0..n * n).map(|k| a(k / n, k % n)).collect();
    let mut x = vec![1.0; n];
    for _ in 0..iters {
        x = (0..n).map(|i| row_dot(&m[i * n..(i + 1) * n], &x) / n as f64).collect();
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_stays_bounded_and_is_not_trivial() {
        let x = reference(64, 10);
        assert!(x.iter().all(|v| v.is_finite() && v.abs() <= 1.0));
        assert!(x.iter().any(|v| *v != 0.0));
        assert_ne!(x[0].to_bits(), x[1].to_bits());
    }
}
