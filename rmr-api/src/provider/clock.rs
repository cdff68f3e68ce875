//! A monotonic clock in plain nanoseconds, for the stamps and deadlines a
//! backend keeps in atomics and reads on every pass (when a waiter left,
//! when an acknowledgement is due).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `CLOCK_MONOTONIC` in nanoseconds: the clock [`Instant`] reads, as a
/// `u64` an atomic can hold. It costs the clock read and no more (no
/// `Duration` arithmetic, as [`Instant::elapsed`] does). Nonzero on a
/// running system, so 0 can stand for "never" in a stamp.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec as u64)
}

/// `d` rounded up to whole milliseconds: how long a progress helper's
/// `epoll_wait` sleeps for a timer `d` away. Its handover's timing is tuned
/// to that grain (a look due in 200 us comes about 1 ms later), so it is
/// kept explicit here rather than left to which `epoll` call the system
/// library makes (`epoll_pwait2`, Linux 5.11, would honour nanoseconds).
pub fn helper_grain(d: Duration) -> Duration {
    Duration::from_millis(d.as_nanos().div_ceil(1_000_000).min(u64::MAX as u128) as u64)
}

/// An [`Instant`] and the [`now_ns`] reading of the same moment: the two
/// scales' common point (they are the same clock). The instant is read
/// between two [`now_ns`] readings and paired with their midpoint; of a
/// few tries the narrowest pair is kept, so a preemption between the reads
/// does not leave a lasting offset (what is left is half the narrowest
/// gap, nanoseconds).
fn anchor() -> (Instant, u64) {
    static ANCHOR: OnceLock<(Instant, u64)> = OnceLock::new();
    *ANCHOR.get_or_init(|| {
        let mut best: Option<(u64, Instant, u64)> = None;
        for _ in 0..8 {
            let a = now_ns();
            let i = Instant::now();
            let b = now_ns();
            let gap = b.saturating_sub(a);
            if best.is_none_or(|(g, _, _)| gap < g) {
                best = Some((gap, i, a + gap / 2));
            }
        }
        let (_, i, n) = best.expect("eight tries");
        (i, n)
    })
}

/// `t` on the [`now_ns`] scale.
pub fn ns_of(t: Instant) -> u64 {
    let (i, n) = anchor();
    match t.checked_duration_since(i) {
        Some(d) => n.saturating_add(d.as_nanos() as u64),
        None => n.saturating_sub(i.duration_since(t).as_nanos() as u64),
    }
}

/// The [`Instant`] of a [`now_ns`]-scale stamp.
pub fn instant_of(ns: u64) -> Instant {
    let (i, n) = anchor();
    if ns >= n {
        i + Duration::from_nanos(ns - n)
    } else {
        i.checked_sub(Duration::from_nanos(n - ns)).unwrap_or(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helpers_grain_rounds_up_to_whole_milliseconds() {
        let ms = Duration::from_millis;
        assert_eq!(helper_grain(Duration::ZERO), Duration::ZERO);
        assert_eq!(helper_grain(Duration::from_nanos(1)), ms(1));
        assert_eq!(helper_grain(Duration::from_micros(200)), ms(1));
        assert_eq!(helper_grain(ms(2)), ms(2));
        assert_eq!(helper_grain(ms(2) + Duration::from_nanos(1)), ms(3));
        assert_eq!(helper_grain(Duration::MAX), ms(u64::MAX));
    }

    #[test]
    fn the_scales_agree_and_the_clock_moves_forward() {
        let a = now_ns();
        let t = Instant::now();
        let b = now_ns();
        assert!(a > 0 && b >= a);
        // An instant maps between the two readings taken around it, within
        // half the anchor's narrowest gap (nanoseconds; a wide margin for a
        // loaded machine or an interpreter).
        let s = ns_of(t);
        assert!(s + 10_000_000 >= a && s <= b + 10_000_000, "{a} <= {s} <= {b}, within 10 ms");
        // There and back.
        let later = t + Duration::from_millis(5);
        let back = instant_of(ns_of(later));
        let diff = if back > later { back - later } else { later - back };
        assert!(diff < Duration::from_micros(1), "{diff:?}");
        // Before the anchor too.
        let before = anchor().0.checked_sub(Duration::from_millis(1)).unwrap_or(anchor().0);
        assert!(instant_of(ns_of(before)) <= anchor().0);
    }
}
