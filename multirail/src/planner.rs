//! The striping planner: no IO, no clock. Given a DTO's length, the rails'
//! weights and the policy, it decides the stripes; given the stripes'
//! measured times, it updates adaptive weights.
//!
//! Adaptive striping is the HSAL paper's batch-based striping and sorting,
//! BSS(n_paths, n_batch, α): the batch is the `n_batch` heaviest of the first
//! `n_paths` live rails, stripe sizes are proportional to the batch's
//! weights, and after every striped DTO each batch rail's weight moves to
//! `w' = (1-α)·w + α·W_batch·(w/t)/Σ(w_k/t_k)`, which keeps the batch's total
//! weight and converges to weights proportional to each rail's speed.

use smallvec::SmallVec;
use std::fmt;
use std::time::Instant;

/// How DTOs are spread over rails.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    /// Everything on the first live rail.
    Single,
    /// Whole messages, rotating over live rails (no striping).
    RoundRobin,
    /// Equal stripes on every live rail.
    Even,
    /// Stripes proportional to fixed weights (e.g. link speeds), one per rail.
    Weighted(Vec<f64>),
    /// HSAL's BSS(n_paths, n_batch, alpha) adaptive striping.
    Adaptive {
        /// How many live rails are considered (0 = all).
        n_paths: usize,
        /// How many of the heaviest considered rails carry each DTO (0 = all).
        n_batch: usize,
        /// Weight update gain, 0 < alpha <= 1 (the paper uses 0.95).
        alpha: f64,
    },
}

impl Policy {
    /// Parses `single`, `round-robin`, `even`, `weighted:W0,W1,..`,
    /// `adaptive` or `adaptive:n_paths,n_batch,alpha`.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<Policy, String> {
        let (name, args) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "single" => Ok(Policy::Single),
            "round-robin" | "rr" => Ok(Policy::RoundRobin),
            "even" => Ok(Policy::Even),
            "weighted" => {
                let w: Result<Vec<f64>, _> = args.split(',').map(str::parse).collect();
                match w {
                    Ok(w) if !w.is_empty() && w.iter().all(|x| *x > 0.0 && x.is_finite()) => {
                        Ok(Policy::Weighted(w))
                    }
                    _ => Err(format!(
                        "weighted needs positive weights, e.g. weighted:4,1 (got `{args}`)"
                    )),
                }
            }
            "adaptive" => {
                if args.is_empty() {
                    return Ok(Policy::Adaptive { n_paths: 0, n_batch: 0, alpha: 0.95 });
                }
                let p: Vec<&str> = args.split(',').collect();
                let bad = || format!("adaptive:n_paths,n_batch,alpha expected (got `{args}`)");
                if p.len() != 3 {
                    return Err(bad());
                }
                let n_paths = p[0].parse().map_err(|_| bad())?;
                let n_batch = p[1].parse().map_err(|_| bad())?;
                let alpha: f64 = p[2].parse().map_err(|_| bad())?;
                if !(alpha > 0.0 && alpha <= 1.0) {
                    return Err(format!("alpha must be in (0, 1], got {alpha}"));
                }
                Ok(Policy::Adaptive { n_paths, n_batch, alpha })
            }
            _ => Err(format!(
                "unknown policy `{s}` (single, round-robin, even, weighted:W0,W1,.., adaptive[:n_paths,n_batch,alpha])"
            )),
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Single => write!(f, "single"),
            Policy::RoundRobin => write!(f, "round-robin"),
            Policy::Even => write!(f, "even"),
            Policy::Weighted(w) => {
                let s: Vec<String> = w.iter().map(|x| x.to_string()).collect();
                write!(f, "weighted:{}", s.join(","))
            }
            Policy::Adaptive { n_paths, n_batch, alpha } => {
                write!(f, "adaptive:{n_paths},{n_batch},{alpha}")
            }
        }
    }
}

/// One piece of a DTO: `len` bytes at `offset` (relative to the DTO) on `rail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// Rail index.
    pub rail: usize,
    /// First byte, relative to the DTO's start.
    pub offset: u64,
    /// Byte count (never zero, except for a zero-length DTO's single stripe).
    pub len: u64,
}

/// Stripes of one DTO (inline for up to 8 rails).
pub type Stripes = SmallVec<[Stripe; 8]>;

/// The planner's state.
#[derive(Clone, Debug)]
pub struct Planner {
    policy: Policy,
    weights: Vec<f64>,
    /// The weights the planner started with (a restored rail's share under
    /// a fixed-weight policy).
    base: Vec<f64>,
    alive: Vec<bool>,
    /// Where ordered traffic goes: the lowest rail at first, then, each
    /// time the control rail fails, the lowest live rail. It never moves
    /// back when a lower rail is restored: the two ends of a connection
    /// move it only on failures, so they agree on it.
    control: Option<usize>,
    outstanding: Vec<u64>,
    threshold: u64,
    align: u64,
    rr: usize,
}

/// Sum the adaptive weights are normalised to.
pub const W_TOTAL: f64 = 1.0;

impl Planner {
    /// A planner for `rails` rails. DTOs shorter than `threshold` go whole
    /// to one rail; stripe boundaries fall on multiples of `align`.
    pub fn new(rails: usize, policy: Policy, threshold: u64, align: u64) -> Planner {
        assert!(rails > 0, "a planner needs at least one rail");
        let weights = match &policy {
            Policy::Weighted(w) => {
                let mut w = w.clone();
                w.resize(rails, w.last().copied().unwrap_or(1.0));
                let s: f64 = w.iter().sum();
                w.iter().map(|x| x / s * W_TOTAL).collect()
            }
            _ => vec![W_TOTAL / rails as f64; rails],
        };
        Planner {
            policy,
            base: weights.clone(),
            weights,
            alive: vec![true; rails],
            control: Some(0),
            outstanding: vec![0; rails],
            threshold,
            align: align.max(1),
            rr: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Current weights (sum to [`W_TOTAL`] over all rails).
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Stripe threshold in bytes.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// Number of live rails.
    pub fn live(&self) -> usize {
        self.alive.iter().filter(|a| **a).count()
    }

    /// Whether rail `r` is alive.
    pub fn is_alive(&self, r: usize) -> bool {
        self.alive.get(r).copied().unwrap_or(false)
    }

    /// Where ordered traffic (sends, receives, immediates, atomics) goes:
    /// rail 0 at first; when the control rail fails, the lowest live rail.
    /// A restored rail does not take it back (see [`Planner::rail_restored`]).
    pub fn control_rail(&self) -> Option<usize> {
        self.control
    }

    /// Marks a rail dead; its weight is shared out among the live rails.
    /// If it was the control rail, the lowest live rail becomes it.
    pub fn rail_failed(&mut self, r: usize) {
        if r >= self.alive.len() || !self.alive[r] {
            return;
        }
        self.alive[r] = false;
        if self.control == Some(r) {
            self.control = self.alive.iter().position(|a| *a);
        }
        let lost = std::mem::take(&mut self.weights[r]);
        let live = self.live();
        if live > 0 {
            for (w, a) in self.weights.iter_mut().zip(&self.alive) {
                if *a {
                    *w += lost / live as f64;
                }
            }
        }
    }

    /// Makes live rail `r` the control rail (the peer's choice, so that
    /// both ends send and receive on one rail). False if `r` is not live.
    pub fn set_control(&mut self, r: usize) -> bool {
        if !self.is_alive(r) {
            return false;
        }
        self.control = Some(r);
        true
    }

    /// Marks a dead rail alive again (it was connected anew), with nothing
    /// outstanding. Its weight: under a fixed-weight policy its configured
    /// share again; under `adaptive` an equal share, the others scaled to
    /// make room (the rate is learnt again from its stripes). The control
    /// rail stays where it is (unless every rail was dead).
    pub fn rail_restored(&mut self, r: usize) {
        if r >= self.alive.len() || self.alive[r] {
            return;
        }
        self.alive[r] = true;
        self.outstanding[r] = 0;
        if self.control.is_none() {
            self.control = Some(r);
        }
        let live = self.live() as f64;
        match self.policy {
            Policy::Adaptive { .. } => {
                let share = W_TOTAL / live;
                let others: f64 =
                    (0..self.weights.len()).filter(|&i| i != r).map(|i| self.weights[i]).sum();
                for (i, w) in self.weights.iter_mut().enumerate() {
                    if i == r {
                        *w = share;
                    } else if others > 0.0 {
                        *w *= (W_TOTAL - share) / others;
                    }
                }
            }
            _ => {
                let sum: f64 =
                    (0..self.base.len()).filter(|&i| self.alive[i]).map(|i| self.base[i]).sum();
                for (i, w) in self.weights.iter_mut().enumerate() {
                    *w = if self.alive[i] { self.base[i] / sum * W_TOTAL } else { 0.0 };
                }
            }
        }
    }

    /// Bytes posted and not yet completed on each rail.
    pub fn outstanding(&self) -> &[u64] {
        &self.outstanding
    }

    /// Records `bytes` posted on `rail`.
    pub fn posted(&mut self, rail: usize, bytes: u64) {
        self.outstanding[rail] += bytes;
    }

    /// Records `bytes` completed on `rail`.
    pub fn completed(&mut self, rail: usize, bytes: u64) {
        self.outstanding[rail] = self.outstanding[rail].saturating_sub(bytes);
    }

    /// The live rail with the least outstanding bytes (ties: lowest index).
    fn least_loaded(&self) -> Option<usize> {
        (0..self.alive.len()).filter(|&r| self.alive[r]).min_by_key(|&r| (self.outstanding[r], r))
    }

    /// Where a whole (unstriped) DTO goes: the control rail while it has
    /// less than a threshold's worth of bytes in flight — so a lone small
    /// DTO and the ordered send that follows it share a rail and never wait
    /// for each other's acknowledgements — else the least-loaded live rail,
    /// so a stream of small DTOs still keeps every rail busy.
    fn whole_rail(&self) -> Option<usize> {
        let c = self.control_rail()?;
        if self.outstanding[c] < self.threshold.max(1) {
            return Some(c);
        }
        self.least_loaded()
    }

    /// The rails and weights one striped DTO uses under the policy.
    fn batch(&self) -> SmallVec<[(usize, f64); 8]> {
        let live = (0..self.alive.len()).filter(|&r| self.alive[r]);
        match &self.policy {
            Policy::Adaptive { n_paths, n_batch, .. } => {
                let np = if *n_paths == 0 { usize::MAX } else { *n_paths };
                let mut c: SmallVec<[(usize, f64); 8]> =
                    live.take(np).map(|r| (r, self.weights[r])).collect();
                // Sort by weight, heaviest first; keep the n_batch heaviest.
                c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                if *n_batch > 0 {
                    c.truncate(*n_batch);
                }
                c.sort_by_key(|x| x.0);
                c
            }
            Policy::Even => live.map(|r| (r, 1.0)).collect(),
            _ => live.map(|r| (r, self.weights[r])).collect(),
        }
    }

    /// Whether a DTO of `len` bytes goes whole to one rail (the policy never
    /// stripes, or it is below the threshold).
    fn goes_whole(&self, len: u64) -> bool {
        matches!(self.policy, Policy::Single | Policy::RoundRobin)
            || len < self.threshold
            || len < 2 * self.align
    }

    /// The rail a whole DTO goes to under the policy (advances round-robin).
    fn whole_target(&mut self) -> Option<usize> {
        match self.policy {
            Policy::Single => self.control_rail(),
            Policy::RoundRobin => {
                let n = self.alive.len();
                let r = (0..n).map(|i| (self.rr + i) % n).find(|&r| self.alive[r])?;
                self.rr = r + 1;
                Some(r)
            }
            _ => self.whole_rail(),
        }
    }

    /// The rail of a DTO of `len` bytes when it goes whole, as [`Planner::plan`]
    /// would place it (and with the same effect on round-robin); `None` when
    /// it may be striped or no rail is alive.
    pub fn whole(&mut self, len: u64) -> Option<usize> {
        if self.goes_whole(len) { self.whole_target() } else { None }
    }

    /// Plans one DTO of `len` bytes. Empty when no rail is alive.
    pub fn plan(&mut self, len: u64) -> Stripes {
        let mut out = Stripes::new();
        let whole = |rail: usize| Stripe { rail, offset: 0, len };
        if self.goes_whole(len) {
            out.extend(self.whole_target().map(whole));
            return out;
        }
        let batch = self.batch();
        if batch.len() <= 1 {
            if let Some(r) = self.whole_rail() {
                out.push(whole(r));
            }
            return out;
        }
        // Proportional split, boundaries aligned; remainder to the last rail.
        // Every batch rail keeps at least one aligned unit while the message
        // allows, so adaptive feedback never starves a rail out for good.
        let wsum: f64 = batch.iter().map(|b| b.1).sum();
        let min_unit = if len >= batch.len() as u64 * self.align { self.align } else { 0 };
        let mut offset = 0u64;
        for (i, &(rail, w)) in batch.iter().enumerate() {
            let left_after = (batch.len() - i - 1) as u64 * min_unit;
            let end = if i + 1 == batch.len() {
                len
            } else {
                let ideal = offset + (len as f64 * w / wsum) as u64;
                (ideal / self.align * self.align).max(offset + min_unit).min(len - left_after)
            };
            if end > offset {
                out.push(Stripe { rail, offset, len: end - offset });
            }
            offset = end;
        }
        out
    }

    /// Feeds back one striped DTO's stripe times `(rail, seconds)`: the BSS
    /// weight update. Other policies ignore it.
    pub fn feedback(&mut self, times: &[(usize, f64)]) {
        let Policy::Adaptive { alpha, .. } = self.policy else { return };
        let times: SmallVec<[(usize, f64); 8]> = times
            .iter()
            .copied()
            .filter(|&(r, t)| r < self.weights.len() && self.alive[r] && t > 0.0 && t.is_finite())
            .collect();
        if times.len() < 2 {
            return;
        }
        let w_batch: f64 = times.iter().map(|&(r, _)| self.weights[r]).sum();
        let denom: f64 = times.iter().map(|&(r, t)| self.weights[r] / t).sum();
        if !(denom > 0.0 && denom.is_finite()) {
            return;
        }
        let floor = W_TOTAL * 1e-3;
        for &(r, t) in &times {
            let w = self.weights[r];
            let target = w_batch * (w / t) / denom;
            self.weights[r] = ((1.0 - alpha) * w + alpha * target).max(floor);
        }
        // Keep the total exact despite the floor and rounding.
        let s: f64 = self.weights.iter().sum();
        for w in &mut self.weights {
            *w *= W_TOTAL / s;
        }
    }
}

/// A rail's measured throughput: bytes completed over *busy* time (time
/// during which the rail had stripes outstanding), averaged over a long
/// byte window. Acknowledgements arrive in bursts, so a per-completion rate
/// would measure the burst, not the link; idle time must not count either.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RailRate {
    bytes: f64,
    secs: f64,
    last: Instant,
}

/// Bytes after which the averaging window is halved.
const RATE_WINDOW: f64 = 64.0 * 1024.0 * 1024.0;

impl RailRate {
    /// No measurement yet.
    pub(crate) fn new() -> Self {
        RailRate { bytes: 0.0, secs: 0.0, last: Instant::now() }
    }

    /// A stripe is posted on a rail with `outstanding` bytes in flight.
    pub(crate) fn posted(&mut self, outstanding: u64, now: Instant) {
        if outstanding > 0 {
            self.secs += now.saturating_duration_since(self.last).as_secs_f64();
        }
        self.last = now;
    }

    /// A stripe of `bytes` completed (the rail was busy until now).
    pub(crate) fn completed(&mut self, bytes: u64, now: Instant) {
        self.secs += now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.bytes += bytes as f64;
        if self.bytes > RATE_WINDOW {
            self.bytes /= 2.0;
            self.secs /= 2.0;
        }
    }

    /// The measured rate in Mbit/s (0 before any measurement).
    pub(crate) fn mbps(&self) -> f64 {
        if self.secs > 0.0 { self.bytes / self.secs * 8e-6 } else { 0.0 }
    }

    /// Seconds this rail needs for `bytes`, once it has a measurement.
    pub(crate) fn time_for(&self, bytes: u64) -> Option<f64> {
        (self.secs > 0.0 && self.bytes > 0.0).then(|| bytes as f64 * self.secs / self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn policies() -> impl Strategy<Value = Policy> {
        prop_oneof![
            Just(Policy::Single),
            Just(Policy::RoundRobin),
            Just(Policy::Even),
            proptest::collection::vec(0.1f64..10.0, 1..6).prop_map(Policy::Weighted),
            (0usize..5, 0usize..5, 0.05f64..1.0)
                .prop_map(|(n_paths, n_batch, alpha)| Policy::Adaptive { n_paths, n_batch, alpha }),
        ]
    }

    proptest! {
        #[test]
        fn stripes_cover_exactly_once(
            rails in 1usize..6, policy in policies(), len in 0u64..(8 << 20),
            threshold in 0u64..(64 << 10), align_pow in 0u32..13, dead in 0usize..6,
        ) {
            let align = 1u64 << align_pow;
            let mut p = Planner::new(rails, policy, threshold, align);
            if dead < rails && rails > 1 { p.rail_failed(dead); }
            let s = p.plan(len);
            prop_assert!(!s.is_empty());
            let mut next = 0;
            for st in &s {
                prop_assert_eq!(st.offset, next, "gap or overlap");
                prop_assert!(st.len > 0 || len == 0, "empty stripe");
                prop_assert!(p.is_alive(st.rail), "stripe on a dead rail");
                if st.offset + st.len < len {
                    prop_assert_eq!((st.offset + st.len) % align, 0, "unaligned boundary");
                }
                next += st.len;
            }
            prop_assert_eq!(next, len);
            let mut rails_used: Vec<usize> = s.iter().map(|x| x.rail).collect();
            rails_used.dedup();
            prop_assert_eq!(rails_used.len(), s.len(), "two stripes on one rail");
        }

        #[test]
        fn whole_agrees_with_plan(
            rails in 1usize..6, policy in policies(), lens in proptest::collection::vec(0u64..(1 << 20), 1..12),
            threshold in 0u64..(64 << 10), align_pow in 0u32..13, dead in 0usize..6,
        ) {
            // The direct path places a DTO with `whole`, the others with `plan`:
            // the same rail (and round-robin state) whenever `whole` answers.
            let mut a = Planner::new(rails, policy, threshold, 1 << align_pow);
            if dead < rails && rails > 1 { a.rail_failed(dead); }
            let mut b = a.clone();
            for len in lens {
                let s = b.plan(len);
                match a.whole(len) {
                    Some(r) => {
                        prop_assert_eq!(s.len(), 1);
                        prop_assert_eq!((s[0].rail, s[0].offset, s[0].len), (r, 0, len));
                    }
                    None => { a = b.clone(); }
                }
            }
        }

        #[test]
        fn adaptive_weights_stay_positive_and_sum(
            speeds in proptest::collection::vec(1.0f64..100.0, 2..5),
            rounds in 1usize..60, alpha in 0.05f64..1.0,
        ) {
            let n = speeds.len();
            let mut p = Planner::new(n, Policy::Adaptive { n_paths: 0, n_batch: 0, alpha }, 0, 1);
            for _ in 0..rounds {
                let s = p.plan(1 << 20);
                let times: Vec<(usize, f64)> =
                    s.iter().map(|st| (st.rail, st.len as f64 / speeds[st.rail] + 1e-6)).collect();
                p.feedback(&times);
                let sum: f64 = p.weights().iter().sum();
                prop_assert!((sum - W_TOTAL).abs() < 1e-9, "sum {}", sum);
                prop_assert!(p.weights().iter().all(|w| *w > 0.0));
            }
        }
    }

    #[test]
    fn adaptive_converges_to_speed_ratio() {
        let speeds = [4.0, 1.0];
        let mut p = Planner::new(2, Policy::parse("adaptive").unwrap(), 0, 4096);
        for _ in 0..20 {
            let s = p.plan(8 << 20);
            let t: Vec<_> = s.iter().map(|st| (st.rail, st.len as f64 / speeds[st.rail])).collect();
            p.feedback(&t);
        }
        let w = p.weights();
        assert!((w[0] / w[1] - 4.0).abs() < 0.1, "weights {w:?}");
    }

    #[test]
    fn small_dtos_stay_on_the_control_rail_until_it_is_loaded() {
        let mut p = Planner::new(3, Policy::Even, 16 << 10, 4096);
        assert_eq!(p.plan(100).as_slice(), &[Stripe { rail: 0, offset: 0, len: 100 }]);
        // A ping-pong's few bytes in flight keep small DTOs on the control rail.
        p.posted(0, 100);
        assert_eq!(p.plan(100)[0].rail, 0);
        // A stream fills it: small DTOs spread by least outstanding bytes.
        p.posted(0, 16 << 10);
        assert_eq!(p.plan(100)[0].rail, 1);
        p.posted(1, 50);
        assert_eq!(p.plan(100)[0].rail, 2);
        p.completed(0, (16 << 10) + 100);
        assert_eq!(p.plan(100)[0].rail, 0);
        assert_eq!(p.plan(64 << 10).len(), 3);
    }

    #[test]
    fn failover_shares_weight_and_moves_control() {
        let mut p = Planner::new(3, Policy::Weighted(vec![2.0, 1.0, 1.0]), 0, 1);
        p.rail_failed(0);
        assert_eq!(p.control_rail(), Some(1));
        assert!((p.weights().iter().sum::<f64>() - W_TOTAL).abs() < 1e-12);
        assert!(p.plan(1000).iter().all(|s| s.rail != 0));
        p.rail_failed(1);
        p.rail_failed(2);
        assert!(p.plan(10).is_empty());
    }

    proptest! {
        #[test]
        fn restored_rails_take_traffic_and_the_control_rail_stays(
            rails in 2usize..6, policy in policies(), len in 0u64..(8 << 20),
            threshold in 0u64..(64 << 10), fails in proptest::collection::vec(0usize..6, 1..8),
        ) {
            let mut p = Planner::new(rails, policy, threshold, 4096);
            for f in fails {
                let f = f % rails;
                if p.live() > 1 { p.rail_failed(f); }
                let ctl = p.control_rail().expect("a live rail");
                prop_assert!(p.is_alive(ctl));
                // Bring every dead rail back but one.
                let dead: Vec<usize> = (0..rails).filter(|&r| !p.is_alive(r)).collect();
                for &r in dead.iter().skip(1) {
                    p.rail_restored(r);
                    prop_assert_eq!(p.control_rail(), Some(ctl), "a restore moved the control rail");
                }
                let sum: f64 = p.weights().iter().sum();
                prop_assert!((sum - W_TOTAL).abs() < 1e-9, "weights sum to {}", sum);
                for r in 0..rails {
                    prop_assert_eq!(p.weights()[r] > 0.0, p.is_alive(r), "rail {} weight", r);
                }
                let s = p.plan(len);
                let mut next = 0;
                for st in &s {
                    prop_assert_eq!(st.offset, next);
                    prop_assert!(p.is_alive(st.rail), "stripe on a dead rail");
                    next += st.len;
                }
                prop_assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn a_restored_rail_is_striped_again_and_a_lower_one_does_not_take_control() {
        let mut p = Planner::new(3, Policy::Even, 0, 4096);
        p.rail_failed(0);
        assert_eq!(p.control_rail(), Some(1));
        p.rail_restored(0);
        assert_eq!(p.control_rail(), Some(1), "the control rail stays");
        assert_eq!(p.plan(3 << 20).len(), 3, "rail 0 carries stripes again");
        let mut w = Planner::new(2, Policy::Weighted(vec![3.0, 1.0]), 0, 1);
        w.rail_failed(1);
        w.rail_restored(1);
        assert!((w.weights()[0] - 0.75).abs() < 1e-12, "{:?}", w.weights());
        let mut a = Planner::new(2, Policy::parse("adaptive").unwrap(), 0, 1);
        a.rail_failed(1);
        a.rail_restored(1);
        assert!((a.weights()[1] - 0.5).abs() < 1e-12, "{:?}", a.weights());
    }

    #[test]
    fn parse_and_print() {
        for s in ["single", "round-robin", "even", "weighted:4,1", "adaptive:2,2,0.95"] {
            assert_eq!(Policy::parse(s).unwrap().to_string(), s);
        }
        assert!(Policy::parse("weighted:0,1").is_err());
        assert!(Policy::parse("adaptive:1,1,2").is_err());
        assert!(Policy::parse("fastest").is_err());
    }

    #[test]
    fn rail_rate_counts_busy_time_only_and_halves_its_window() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut r = RailRate { bytes: 0.0, secs: 0.0, last: t0 };
        assert_eq!(r.time_for(1), None, "no measurement yet");
        // Idle until 100 ms (nothing outstanding): not counted.
        r.posted(0, ms(100));
        // 1 MB completes 10 ms later: 1e8 B/s.
        r.completed(1_000_000, ms(110));
        let t = r.time_for(1_000_000).unwrap();
        assert!((t - 0.010).abs() < 1e-9, "{t}");
        // Busy from 110 (bytes outstanding) to 130: 20 ms for 1 MB more.
        r.posted(500_000, ms(110));
        r.completed(1_000_000, ms(130));
        let t = r.time_for(2_000_000).unwrap();
        assert!((t - 0.030).abs() < 1e-9, "{t}");
        // Past the window the sums halve; the rate stays.
        r.completed(70 << 20, ms(1130));
        assert!(r.bytes <= RATE_WINDOW);
        let per_byte = r.time_for(1).unwrap();
        let want = 1.030 / (2_000_000.0 + (70u64 << 20) as f64);
        assert!((per_byte - want).abs() / want < 1e-9, "{per_byte} vs {want}");
    }
}
