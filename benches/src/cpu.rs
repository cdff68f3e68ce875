//! How busy the machine's CPUs were over a measurement, from `/proc/stat`.
//!
//! The lab runs client and server on one host, so the machine-wide figure
//! covers both ends of a transfer: it tells whether a run was bound by the
//! CPUs (all of them busy) or by something else, and what a gigabit costs
//! in CPU time (`Mbit/s` divided by busy CPUs), which is how transports
//! that share the same cores are compared fairly.

use std::time::Instant;

/// Jiffies since boot over all online CPUs: (busy, total, CPUs counted).
/// The CPU count comes from the same file (the `cpuN` lines), not from this
/// thread's affinity mask, which a `taskset` narrows.
fn jiffies() -> Option<(u64, u64, usize)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().next().filter(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is
    // already in user); idle and iowait are not busy.
    if v.len() < 8 {
        return None;
    }
    let total: u64 = v[..8].iter().sum();
    let cpus = s
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("cpu"))
        .filter(|l| l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some((total - v[3] - v[4], total, cpus.max(1)))
}

/// A running measurement of machine-wide CPU use.
pub(crate) struct CpuMeter {
    start: Option<(u64, u64, usize)>,
    at: Instant,
}

impl CpuMeter {
    /// Starts measuring now.
    pub(crate) fn start() -> CpuMeter {
        CpuMeter { start: jiffies(), at: Instant::now() }
    }

    /// Average number of busy CPUs since [`CpuMeter::start`] (between 0 and
    /// the CPU count); `None` without `/proc/stat` or when too little time
    /// passed for its tick to tell (under 50 ms).
    pub(crate) fn busy_cpus(&self) -> Option<f64> {
        let (b0, t0, _) = self.start?;
        let (b1, t1, cpus) = jiffies()?;
        if self.at.elapsed().as_millis() < 50 || t1 <= t0 {
            return None;
        }
        Some((b1 - b0) as f64 / (t1 - t0) as f64 * cpus as f64)
    }
}

/// Machine-wide CPU use summed over several spans: the turns one session
/// of a paired run took (`rmr-bench client --paired`/`--versus`), while the
/// other session idled. Both ends of the lab share the machine, so a turn's
/// busy CPUs are that session's, both ends together.
#[derive(Default)]
pub(crate) struct CpuSum {
    busy: u64,
    total: u64,
    cpus: usize,
    spans: u32,
}

impl CpuSum {
    /// Adds the span from `m`'s start until now.
    pub(crate) fn add(&mut self, m: &CpuMeter) {
        if let (Some((b0, t0, _)), Some((b1, t1, cpus))) = (m.start, jiffies()) {
            self.busy += b1.saturating_sub(b0);
            self.total += t1.saturating_sub(t0);
            self.cpus = cpus;
            self.spans += 1;
        }
    }

    /// Average number of busy CPUs over the spans added; `None` when their
    /// ticks are too few to tell (under 50 ms on every CPU together).
    pub(crate) fn busy_cpus(&self) -> Option<f64> {
        // /proc/stat counts in USER_HZ (100) ticks per CPU.
        let enough = self.total >= 5 * self.cpus.max(1) as u64;
        (self.spans > 0 && enough).then(|| self.busy as f64 / self.total as f64 * self.cpus as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_shows_as_about_one_cpu() {
        let m = CpuMeter::start();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 300 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let busy = m.busy_cpus().expect("/proc/stat is readable on Linux");
        let cpus = jiffies().expect("/proc/stat").2 as f64;
        assert!(cpus >= 1.0);
        // This thread alone keeps one CPU busy; others may add to it.
        assert!(busy >= 0.5 && busy <= cpus + 0.01, "busy CPUs {busy} of {cpus}");
    }

    #[test]
    fn spans_sum_to_the_busy_cpus_of_their_turns() {
        let mut sum = CpuSum::default();
        assert_eq!(sum.busy_cpus(), None, "nothing added yet");
        // Two busy turns with an idle gap between them that must not count.
        for _ in 0..2 {
            let m = CpuMeter::start();
            let t = Instant::now();
            let mut x = 0u64;
            while t.elapsed().as_millis() < 200 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            sum.add(&m);
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let busy = sum.busy_cpus().expect("400 ms of turns is enough to tell");
        let cpus = jiffies().expect("/proc/stat").2 as f64;
        // The sleeps between the turns would have halved a single meter's figure.
        assert!(busy >= 0.5 && busy <= cpus + 0.01, "busy CPUs {busy} of {cpus}");
    }
}
