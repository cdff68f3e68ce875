//! The IA's progress helper: one thread per IA, however many endpoints it
//! has, which stands back while an application thread drives them (it
//! looks every couple of milliseconds whether the driver left, one timer
//! for all of them), costs no wake-up while they are idle, and ends once
//! the IA has no endpoint left. The test counts the helper's wake-ups
//! (its kernel context-switch counts) while idle and over a run of short
//! waits.
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

/// The helper thread of the IA on 127.0.0.1 (thread names are cut to 15
/// bytes: `rmr-tcp-127.0.0.1` reads `rmr-tcp-127.0.0`).
const HELPER: &str = "rmr-tcp-127.0.0";

#[test]
fn one_helper_per_ia_asleep_while_idle_one_timer_while_driven_gone_when_unused() {
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
    while sevd.dequeue().is_some() {}
    // A new thread names itself once it first runs: give it a moment.
    let named_by = Instant::now() + Duration::from_secs(5);
    while switches(HELPER).1 == 0 && Instant::now() < named_by {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(switches(HELPER).1, 1, "one helper thread for the IA's {} endpoints", 2 * EPS);
    assert_eq!(switches("rmr-tcp-ep").1, 0, "no thread per endpoint");

    // Idle: nobody waits, nothing is sent; once the helper has taken the
    // endpoints over (200 µs after the last driver), it sleeps.
    std::thread::sleep(Duration::from_millis(50));
    let (idle0, _) = switches(HELPER);
    std::thread::sleep(Duration::from_millis(300));
    let (idle1, _) = switches(HELPER);
    println!(
        "RESULT idle: helper wake-ups over 300 ms with {} idle endpoints: {}",
        2 * EPS,
        idle1 - idle0
    );
    assert!(idle1 - idle0 <= 2, "{} helper wake-ups while every endpoint was idle", idle1 - idle0);

    // Short waits one after the other, as a rank polling for messages
    // does: each drives the four client endpoints for a millisecond and
    // leaves. The helper stands back and looks every 2 ms: one timer for
    // the IA, however many endpoints the waiter drives.
    let _ = cevd.wait(Some(Duration::from_millis(1)), 1);
    let (before, _) = switches(HELPER);
    let t0 = Instant::now();
    for _ in 0..WAITS {
        assert!(cevd.wait(Some(Duration::from_millis(1)), 1).is_err(), "nothing was sent");
    }
    let took = t0.elapsed();
    let (after, _) = switches(HELPER);
    let woke = after - before;
    let looks = (took.as_micros() / 2000) as u64 + 1;
    println!(
        "RESULT waits={WAITS} in {took:?}: helper wake-ups {woke} ({EPS} driven endpoints, {looks} 2 ms looks)"
    );
    // Its looks, plus a take-over and a kick back whenever the waiter was
    // away for 200 µs between two waits (a preempted test thread); a
    // helper that woke per endpoint would make four times the looks.
    assert!(
        woke <= looks + (WAITS / 10) as u64,
        "{woke} helper wake-ups over {WAITS} waits ({looks} looks) on {EPS} endpoints"
    );
    drop(eps);
    drop(cevd);
    drop(sevd);
    let end = Instant::now() + Duration::from_secs(10);
    while switches(HELPER).1 > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(switches(HELPER).1, 0, "the helper ends once the IA has no endpoint");
}
