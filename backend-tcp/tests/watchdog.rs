//! The progress watchdog: while an application thread drives endpoints,
//! their progress threads sleep, and one process-wide thread
//! (`rmr-tcp-watch`) looks after all of them. A waiter on an EVD that many
//! endpoints share drives them all; before the watchdog, each of their
//! progress threads woke every couple of milliseconds to see whether the
//! waiter had left. This test counts those wake-ups over a run of short
//! waits (their kernel context-switch counts), then checks that the
//! watchdog thread goes once nothing is left to watch.
//!
//! One test in its own binary: the counts and the thread list are the
//! process's.

use rmr_api::{EpEvds, Event};
use std::time::{Duration, Instant};

const EPS: usize = 4;
const WAITS: usize = 300;

/// Voluntary context switches of this process's threads whose name starts
/// with `prefix`, summed, and how many such threads there are.
fn switches(prefix: &str) -> (u64, usize) {
    let (mut sum, mut n) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let p = t.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !name.trim_end().starts_with(prefix) {
            continue;
        }
        n += 1;
        let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
        sum += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    (sum, n)
}

#[test]
fn endpoints_driven_by_one_waiter_sleep_and_the_watchdog_goes_when_idle() {
    backend_tcp::register();
    let ia = rmr_api::open("tcp:127.0.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let (cevd, sevd, psp_evd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let port = 17960;
    let _psp = ia.create_psp(port, &psp_evd).unwrap();
    let mut eps = Vec::new();
    for _ in 0..EPS {
        let sep = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
        let (s2, pe) = (sep.clone(), psp_evd.clone());
        let t = std::thread::spawn(move || match pe.wait(Some(Duration::from_secs(5)), 1) {
            Ok(Event::ConnectionRequest(cr)) => cr.accept(&s2, b"").unwrap(),
            e => panic!("{e:?}"),
        });
        // Every client endpoint reports to the one EVD the test waits on.
        let cep = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
        cep.connect("127.0.0.1", port, b"", Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        eps.push((cep, sep));
    }
    while cevd.dequeue().is_some() {}
    // Short waits one after the other, as a rank polling for messages
    // does: each drives all four endpoints for a millisecond and leaves.
    let _ = cevd.wait(Some(Duration::from_millis(1)), 1);
    // A new thread names itself once it first runs: on a busy host the last
    // progress thread may still carry its parent's name for a moment (one
    // too few), and the watchdog thread, which a progress thread starts,
    // its parent's `rmr-tcp-ep…` (one too many).
    let named_by = Instant::now() + Duration::from_secs(5);
    while switches("rmr-tcp-ep").1 != 2 * EPS && Instant::now() < named_by {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (before, threads) = switches("rmr-tcp-ep");
    assert_eq!(threads, 2 * EPS, "one progress thread per endpoint, both sides");
    let t0 = Instant::now();
    for _ in 0..WAITS {
        assert!(cevd.wait(Some(Duration::from_millis(1)), 1).is_err(), "nothing was sent");
    }
    let took = t0.elapsed();
    let (after, _) = switches("rmr-tcp-ep");
    let (_, watchers) = switches("rmr-tcp-watch");
    let woke = after - before;
    println!(
        "RESULT waits={WAITS} in {took:?}: progress-thread wake-ups {woke} ({EPS} driven endpoints)"
    );
    assert_eq!(watchers, 1, "one watchdog thread for the process");
    // Each of the four used to wake every 2 ms at most: hundreds over the
    // run. Asleep, they wake only if the waiter is away for 200 µs between
    // two waits (a preempted test thread).
    assert!(
        woke < (EPS * WAITS / 20) as u64,
        "{woke} progress-thread wake-ups over {WAITS} waits on {EPS} endpoints"
    );
    drop(eps);
    drop(cevd);
    let end = Instant::now() + Duration::from_secs(5);
    while switches("rmr-tcp-watch").1 > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(switches("rmr-tcp-watch").1, 0, "the watchdog thread ends with nothing to watch");
}
