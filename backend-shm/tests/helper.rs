//! The IA's progress helper: one thread per IA, asleep while its endpoints
//! are idle, and not woken at every wait of a thread that polls in waits.
//! After the helper took an endpoint over it looks at it soon again, so
//! that a thread that computes between its waits hands it over at once
//! (tests/handover.rs); a thread that comes straight back instead, twice
//! in a row, ends those quick looks, and the helper then looks once every
//! `watch`. The test counts the helper's wake-ups (its kernel
//! context-switch counts) while idle and over a run of short waits.
//!
//! One test in its own binary: the counts and the thread list are the
//! process's.

use rmr_api::{EpEvds, Event};
use std::time::{Duration, Instant};

const EPS: usize = 4;
const WAITS: usize = 300;
const HELPER: &str = "rmr-shm-helper";

/// Voluntary context switches of this process's threads named `name`,
/// summed, and how many such threads there are.
fn switches(name: &str) -> (u64, usize) {
    let (mut sum, mut n) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let p = t.path();
        if std::fs::read_to_string(p.join("comm")).unwrap_or_default().trim_end() != name {
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
fn the_helper_sleeps_while_idle_and_is_not_woken_at_every_wait_of_a_polling_thread() {
    backend_shm::register();
    // The default watch (2 ms).
    let name = format!("helper{}", std::process::id());
    let ia = rmr_api::open(&format!("shm:{name}")).unwrap();
    let pz = ia.create_pz().unwrap();
    let (cevd, sevd, psp_evd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let service = 30_000 + (std::process::id() % 20_000) as u16;
    let psp = ia.create_psp(service, &psp_evd).unwrap();
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
        cep.connect(&name, service, b"", Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        eps.push((cep, sep));
    }
    while cevd.dequeue().is_some() {}
    while sevd.dequeue().is_some() {}
    let named_by = Instant::now() + Duration::from_secs(5);
    while switches(HELPER).1 == 0 && Instant::now() < named_by {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(switches(HELPER).1, 1, "one helper thread for the IA's {} endpoints", 2 * EPS);

    // Idle: nobody waits and nothing is sent; the helper has the
    // endpoints and sleeps on their doorbells.
    std::thread::sleep(Duration::from_millis(50));
    let (idle0, _) = switches(HELPER);
    std::thread::sleep(Duration::from_millis(300));
    let (idle1, _) = switches(HELPER);
    println!("RESULT idle: helper wake-ups over 300 ms: {}", idle1 - idle0);
    assert!(idle1 - idle0 <= 2, "{} helper wake-ups while every endpoint was idle", idle1 - idle0);

    // Waits of a millisecond one after the other, as a rank polling for
    // messages does. Each lasts from one of the helper's quick looks to
    // the next, so its end would hand the endpoints over; the thread is
    // straight back each time, and after two such returns the helper
    // looks only at its watch (every 2 ms).
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
    // Its looks, plus now and then a takeover between two waits and a
    // kick back. Handed over and kicked back at every wait, the helper
    // would wake about three times per wait.
    assert!(
        woke <= looks + (WAITS / 6) as u64,
        "{woke} helper wake-ups over {WAITS} waits ({looks} looks) on {EPS} endpoints"
    );
    drop(eps);
    drop((cevd, sevd, psp, psp_evd, pz, ia));
    let end = Instant::now() + Duration::from_secs(10);
    while switches(HELPER).1 > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(switches(HELPER).1, 0, "the helper ends with the IA");
}
