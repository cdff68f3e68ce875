//! A round trip's timeline, stage by stage, for latency work: where the
//! microseconds between a message's arrival and the answer's departure go.
//!
//! Built only with the `stages` feature (`cargo build --release -p rmr-bench
//! --features rmr-api/stages`); without it every call here is empty and
//! compiles away. Each thread records, for every pair of consecutive
//! [`Stage`]s it passes, how long it took from one to the next; `rmr-bench`
//! prints the quantiles when a latency session ends. A tag ([`set_tag`])
//! keeps two workloads of one thread apart (the paired latency runs).

/// A point of a round trip that backends and layers stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// Bytes read from a socket.
    RxData = 0,
    /// An event pushed to a software EVD.
    Push = 1,
    /// The application's wait returned.
    WaitReturned = 2,
    /// The application posted its message.
    Posted = 3,
    /// A frame about to be written to a socket.
    TxWrite = 4,
    /// The application began a wait.
    WaitBegun = 5,
    /// A socket write returned (the bytes are in the kernel).
    TxDone = 6,
    /// A waiter's `poll` found nothing (a spinning waiter's zero-timeout
    /// look, or a blocking poll that timed out).
    PollDone = 7,
    /// A spinning waiter's yield returned.
    Yielded = 8,
    /// A `poll` found a descriptor ready.
    PollReady = 9,
}

#[cfg(feature = "stages")]
mod imp {
    use super::Stage;
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeMap;
    use std::time::Instant;

    type Key = (u8, Stage);
    const MAX_SAMPLES: usize = 1 << 20;

    thread_local! {
        static TAG: Cell<u8> = const { Cell::new(0) };
        static LAST: Cell<Option<(Key, Instant)>> = const { Cell::new(None) };
        static SPANS: RefCell<BTreeMap<(Key, Key), Vec<u32>>> = const { RefCell::new(BTreeMap::new()) };
    }

    pub(super) fn set_tag(t: u8) {
        TAG.with(|x| x.set(t));
    }

    pub(super) fn stamp(s: Stage) {
        let now = Instant::now();
        let key = (TAG.with(Cell::get), s);
        LAST.with(|l| {
            if let Some((from, t)) = l.get() {
                let ns = u32::try_from((now - t).as_nanos()).unwrap_or(u32::MAX);
                SPANS.with(|m| {
                    let mut m = m.borrow_mut();
                    let v = m.entry((from, key)).or_default();
                    // Bounded: a long session keeps its first million samples.
                    if v.len() < MAX_SAMPLES {
                        v.push(ns);
                    }
                });
            }
            l.set(Some((key, now)));
        });
    }

    pub(super) fn report(min: usize) -> Vec<String> {
        SPANS.with(|m| {
            let mut m = m.borrow_mut();
            let mut out = Vec::new();
            for (((ta, a), (tb, b)), v) in m.iter_mut() {
                if v.len() < min {
                    continue;
                }
                v.sort_unstable();
                let q = |f: f64| f64::from(v[((v.len() - 1) as f64 * f) as usize]) / 1e3;
                out.push(format!(
                    "t{ta} {a:?} -> t{tb} {b:?}: n {} p25 {:.2} p50 {:.2} p75 {:.2} p90 {:.2} us",
                    v.len(),
                    q(0.25),
                    q(0.5),
                    q(0.75),
                    q(0.9)
                ));
            }
            m.clear();
            out
        })
    }
}

/// Records that this thread reached `s` (with the `stages` feature).
#[inline(always)]
pub fn stamp(s: Stage) {
    #[cfg(feature = "stages")]
    imp::stamp(s);
    #[cfg(not(feature = "stages"))]
    let _ = s;
}

/// Tags this thread's next stamps (0 by default), to keep two workloads
/// of one thread apart.
#[inline(always)]
pub fn set_tag(t: u8) {
    #[cfg(feature = "stages")]
    imp::set_tag(t);
    #[cfg(not(feature = "stages"))]
    let _ = t;
}

/// This thread's spans seen at least `min` times, one line each
/// (`t<tag> <from> -> t<tag> <to>: n, quantiles`), and forgets them.
/// Empty without the `stages` feature.
pub fn report(min: usize) -> Vec<String> {
    #[cfg(feature = "stages")]
    return imp::report(min);
    #[cfg(not(feature = "stages"))]
    {
        let _ = min;
        Vec::new()
    }
}

#[cfg(all(test, feature = "stages"))]
mod tests {
    use super::*;

    #[test]
    fn spans_between_consecutive_stages_are_counted_per_tag() {
        for _ in 0..3 {
            stamp(Stage::WaitBegun);
            stamp(Stage::WaitReturned);
        }
        set_tag(1);
        stamp(Stage::Posted);
        let r = report(1);
        assert!(r.iter().any(|l| l.starts_with("t0 WaitBegun -> t0 WaitReturned: n 3")), "{r:?}");
        assert!(r.iter().any(|l| l.starts_with("t0 WaitReturned -> t0 WaitBegun: n 2")), "{r:?}");
        assert!(r.iter().any(|l| l.starts_with("t0 WaitReturned -> t1 Posted: n 1")), "{r:?}");
        assert!(report(1).is_empty(), "a report forgets what it returned");
    }
}
