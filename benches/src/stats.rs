//! Summaries of repeated measurements.

/// Median and spread of a set of samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Summary {
    /// Median.
    pub(crate) median: f64,
    /// Smallest sample.
    pub(crate) min: f64,
    /// Largest sample.
    pub(crate) max: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Mean (fi_pingpong and friends print means: compare like with like).
    pub(crate) mean: f64,
    /// 99th percentile (a latency row's tail).
    pub(crate) p99: f64,
    /// 99.9th percentile.
    pub(crate) p999: f64,
    /// Number of samples.
    pub(crate) n: usize,
}

/// Summarises `v` (sorted in place). An empty set gives zeros.
pub(crate) fn summarize(v: &mut [f64]) -> Summary {
    if v.is_empty() {
        return Summary::default();
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| {
        let x = p * (v.len() - 1) as f64;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
    };
    Summary {
        median: q(0.5),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        min: v[0],
        max: v[v.len() - 1],
        p10: q(0.1),
        p90: q(0.9),
        p99: q(0.99),
        p999: q(0.999),
        n: v.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles() {
        let s = summarize(&mut [5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.median, s.min, s.max, s.n, s.mean), (3.0, 1.0, 5.0, 5, 3.0));
        assert!((s.p10 - 1.4).abs() < 1e-9);
        let mut v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let t = summarize(&mut v);
        assert!((t.p99 - 990.01).abs() < 1e-9 && (t.p999 - 999.001).abs() < 1e-9, "{t:?}");
        assert_eq!(summarize(&mut []).n, 0);
    }
}
