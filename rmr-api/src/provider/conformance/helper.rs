//! The IA progress helper's wake-up check, for a backend with one helper
//! thread per IA (tcp, shm): one helper however many endpoints; asleep
//! while they are idle; not woken at every wait of a thread that polls in
//! waits of a millisecond (after two quick returns it looks only at its
//! watch); gone once the IA and its endpoints are. It counts the helper's
//! wake-ups by its kernel context-switch counts, so a backend runs it as
//! the one test of its own test binary (`tests/helper.rs`): the counts
//! and the thread list are the process's. [`reads_while_polled`] is the
//! load of a check, counted the same way, that a thread polling its EVD
//! answers the reads aimed at it.

use crate::ia::EpEvds;
use crate::{Event, open};
use std::time::{Duration, Instant};

/// Endpoint pairs the check connects; every client endpoint reports to one
/// EVD, which the check waits on.
const EPS: usize = 4;
/// Waits of a millisecond, one after the other.
const WAITS: usize = 300;

/// What [`helper_wakeups`] runs on.
pub struct HelperRig<'a> {
    /// The IA's spec (both ends of each pair are endpoints of this IA).
    pub spec: &'a str,
    /// Where the client endpoints connect, and the service they connect to.
    pub remote: &'a str,
    pub service: u16,
    /// The start of the helper thread's name (Linux cuts thread names to
    /// 15 bytes).
    pub helper: &'a str,
    /// The start of a thread name none may have (no thread per endpoint).
    pub no_threads: Option<&'a str>,
    /// The wake-ups allowed beyond the helper's looks, one per this many
    /// waits (a takeover and a kick back when the waiting thread was away
    /// between two waits, as a preempted test thread is).
    pub waits_per_extra: usize,
}

/// Voluntary context switches of this process's threads whose name starts
/// with `prefix`, summed, and how many such threads there are.
pub fn thread_switches(prefix: &str) -> (u64, usize) {
    let (mut sum, mut n) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
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

/// The check (see the module's doc); panics with what failed.
pub fn helper_wakeups(r: &HelperRig<'_>) {
    let helper = r.helper;
    let ia = open(r.spec).expect("open the IA");
    let pz = ia.create_pz().unwrap();
    let (cevd, sevd, psp_evd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(r.service, &psp_evd).unwrap();
    let mut eps = Vec::new();
    for _ in 0..EPS {
        let sep = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
        let (s2, pe) = (sep.clone(), psp_evd.clone());
        let t = std::thread::spawn(move || match pe.wait(Some(Duration::from_secs(5)), 1) {
            Ok(Event::ConnectionRequest(cr)) => cr.accept(&s2, b"").unwrap(),
            e => panic!("{e:?}"),
        });
        let cep = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
        cep.connect(r.remote, r.service, b"", Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        eps.push((cep, sep));
    }
    while cevd.dequeue().is_some() {}
    while sevd.dequeue().is_some() {}
    // A new thread names itself once it first runs: give it a moment.
    let named_by = Instant::now() + Duration::from_secs(5);
    while thread_switches(helper).1 == 0 && Instant::now() < named_by {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        thread_switches(helper).1,
        1,
        "one helper thread for the IA's {} endpoints",
        2 * EPS
    );
    if let Some(p) = r.no_threads {
        assert_eq!(thread_switches(p).1, 0, "no thread per endpoint");
    }

    // Idle: nobody waits and nothing is sent; once the helper has taken
    // the endpoints over, it sleeps.
    std::thread::sleep(Duration::from_millis(50));
    let (idle0, _) = thread_switches(helper);
    std::thread::sleep(Duration::from_millis(300));
    let (idle1, _) = thread_switches(helper);
    println!(
        "RESULT idle: helper wake-ups over 300 ms with {} idle endpoints: {}",
        2 * EPS,
        idle1 - idle0
    );
    assert!(idle1 - idle0 <= 2, "{} helper wake-ups while every endpoint was idle", idle1 - idle0);

    // Waits of a millisecond one after the other, as a rank polling for
    // messages does: each drives the client endpoints and leaves. The
    // helper stands back and looks at its watch, one timer for the IA
    // however many endpoints the waiter drives; a wait that lasts from
    // one of its quick looks to the next would hand the endpoints over,
    // but the thread is straight back each time, and after two such
    // returns the helper looks only at its watch.
    let _ = cevd.wait(Some(Duration::from_millis(1)), 1);
    let (before, _) = thread_switches(helper);
    let t0 = Instant::now();
    for _ in 0..WAITS {
        assert!(cevd.wait(Some(Duration::from_millis(1)), 1).is_err(), "nothing was sent");
    }
    let took = t0.elapsed();
    let (after, _) = thread_switches(helper);
    let woke = after - before;
    let looks = (took.as_micros() / 2000) as u64 + 1;
    println!(
        "RESULT waits={WAITS} in {took:?}: helper wake-ups {woke} ({EPS} driven endpoints, {looks} 2 ms looks)"
    );
    // Handed over and kicked back at every wait, the helper would wake
    // about three times per wait; woken per endpoint, four times the looks.
    let bound = looks + (WAITS / r.waits_per_extra) as u64;
    assert!(
        woke <= bound,
        "{woke} helper wake-ups over {WAITS} waits ({looks} looks, bound {bound}) on {EPS} endpoints"
    );
    drop(eps);
    drop((cevd, sevd, psp, psp_evd, pz, ia));
    let end = Instant::now() + Duration::from_secs(10);
    while thread_switches(helper).1 > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(thread_switches(helper).1, 0, "the helper ends with the IA");
}

/// [`reads_while_polled`] in batches of `rounds` reads, counting the
/// wake-ups of the threads named `helper` (b's progress helpers) in each,
/// until a batch stays under `rounds / 2` or `batches` ran. Returns the
/// fewest wake-ups of a batch and the helpers counted after each batch
/// (the fewest). Polls that drive b's endpoints leave a few wake-ups in a
/// batch; polls that never read leave at least one per read in every
/// batch. A host that keeps b's poller off the CPU while reads wait hands
/// reads to the helpers in some batches (up to 190 of 200 here, then 0 in
/// the next batch of the same process): the best batch is the measure.
pub fn fewest_helper_wakeups(
    p: &super::Pair,
    helper: &str,
    rounds: u64,
    batches: u32,
) -> (u64, usize) {
    let (mut best, mut helpers) = (u64::MAX, usize::MAX);
    for batch in 1..=batches {
        // (A helper still starting is counted from zero.)
        let woken0 = thread_switches(helper).0;
        let polls = reads_while_polled(p, rounds);
        let (now, n) = thread_switches(helper);
        let woken = now.checked_sub(woken0).expect("b's helpers kept running");
        println!(
            "RESULT batch {batch}: {helper} woke {woken} times in {rounds} reads ({polls} polls)"
        );
        (best, helpers) = (best.min(woken), helpers.min(n));
        if best < rounds / 2 {
            break;
        }
    }
    (best, helpers)
}

/// Side a's thread reads the last 8 bytes of a 4 KiB region of side b's
/// `rounds` times (each value checked), while b's thread only polls its
/// EVD (zero-timeout waits, which must find no event: a read raises none
/// at its target). Returns b's polls. A backend's test counts b's helper
/// wake-ups around it ([`thread_switches`]): polls that drive b's
/// endpoints answer the reads themselves.
pub fn reads_while_polled(p: &super::Pair, rounds: u64) -> u64 {
    use super::{Buf, expect_ok};
    use crate::{Access, Cookie, DtoFlags, Error};
    use std::sync::atomic::{AtomicBool, Ordering};
    let page = Buf::new(&p.pz_b, 4096, Access::ALL, 0);
    let copy = Buf::new(&p.pz_a, 4096, Access::ALL, 0);
    let mut polls = 0u64;
    for round in 1..=rounds {
        page.mem.write(4088, &round.to_le_bytes()).unwrap();
        let a_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ctx = page.ctx();
                p.a.post_rdma_read(&[copy.sge()], ctx.at(0), Cookie(round), DtoFlags::empty())
                    .unwrap();
                expect_ok(&p.evd_a, round);
                assert_eq!(copy.bytes()[4088..], round.to_le_bytes(), "round {round}");
                a_done.store(true, Ordering::SeqCst);
            });
            while !a_done.load(Ordering::SeqCst) {
                match p.evd_b.wait(Some(Duration::ZERO), 1) {
                    Err(Error::Timeout) => polls += 1,
                    r => panic!("round {round}: a read raises no event at its target: {r:?}"),
                }
                std::thread::yield_now();
            }
        });
    }
    polls
}
