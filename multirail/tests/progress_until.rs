//! `Evd::progress_until` on a multirail EVD drives the rails' sockets
//! itself: a flag the peer RDMA-writes (a barrier's signal) lands in the
//! waiting thread's own context. A wait that slept on the EVD's
//! descriptor instead handed the rails to their progress helpers (arming
//! the descriptor releases the endpoints to them), which placed each flag
//! after a wake-up or more: b's helpers, told apart by name, are counted.
//! Their periodic looks are made rare (`RMR_TCP_WATCH_MS`, set once before
//! any IA opens; this file is its own test binary). Real TCP rails on
//! loopback.

use rmr_api::Cookie;
use rmr_api::provider::conformance::helper::thread_switches;
use rmr_api::provider::conformance::{Buf, Pair, Target, WAIT, expect_ok};
use rmr_api::{Access, DtoFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const RW: Access = Access::ALL;

fn register() {
    backend_tcp::register();
    multirail::register();
}

/// Side b's thread waits in `progress_until` for a flag side a's thread
/// writes, then on its EVD for the message a sends once the write
/// completed.
/// Side b's rails are on 127.0.`net`.x, side a's on 127.0.0.x: b's helper
/// threads are told apart by name (Linux keeps 15 bytes of it).
fn flag_lands_in_the_waiters_context(engine: &str, net: u8) {
    let a = format!("multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine={engine}");
    let b = format!("multirail:tcp:127.0.{net}.1,tcp:127.0.{net}.2;engine={engine}");
    let helper = format!("rmr-tcp-127.0.{net}");
    let t = Target::new("multirail-progress-until", register, &a, &b);
    let p = Pair::new(&t);
    let flag = Buf::new(&p.pz_b, 8, RW, 0);
    let value = Buf::new(&p.pz_a, 8, RW, 0);
    let (note_a, note_b) = (Buf::new(&p.pz_a, 8, RW, 0), Buf::new(&p.pz_b, 8, RW, 0));
    const ROUNDS: u64 = 50;
    // A thread takes its name itself once it runs: a helper started while
    // the pair connected may not carry it yet.
    let named = std::time::Instant::now() + Duration::from_secs(5);
    while thread_switches(&helper).1 == 0 && std::time::Instant::now() < named {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (woken0, helpers) = thread_switches(&helper);
    assert!(helpers > 0, "side b's rails have progress helpers ({helper}...)");
    for round in 1..=ROUNDS {
        value.mem.write(0, &round.to_le_bytes()).unwrap();
        p.b.post_recv(&[note_b.sge()], Cookie(round), DtoFlags::empty()).unwrap();
        let a_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ctx = flag.ctx();
                let at = ctx.at(0);
                p.a.post_rdma_write(&[value.sge()], at, Cookie(round), DtoFlags::empty()).unwrap();
                expect_ok(&p.evd_a, round);
                p.a.post_send(&[note_a.sge()], Cookie(1000 + round), DtoFlags::empty()).unwrap();
                expect_ok(&p.evd_a, 1000 + round);
                a_done.store(true, Ordering::SeqCst);
            });
            let seen = || flag.bytes() == round.to_le_bytes();
            let ok = p.evd_b.progress_until(Some(WAIT), None, &seen);
            assert!(ok, "round {round}: the flag never landed while b waited for it");
            assert!(seen(), "round {round}: progress_until returned before the flag landed");
            expect_ok(&p.evd_b, round);
            // a's send completes once b acknowledges it: b drives on (in
            // short waits: a's flag is a local one, no event wakes b).
            let done = || a_done.load(Ordering::SeqCst);
            while !done() {
                p.evd_b.progress_until(Some(Duration::from_millis(1)), None, &done);
            }
        });
    }
    // b's thread placed the flags itself: under 2 helper wake-ups a flag
    // (17-30 in all were seen). A wait that sleeps on the EVD's descriptor
    // hands b's rails to their helpers: 352 wake-ups for the 50 flags.
    let woken = thread_switches(&helper).0 - woken0;
    println!("RESULT {engine}: b's helpers woke {woken} times in {ROUNDS} flag waits");
    assert!(woken < 2 * ROUNDS, "{woken} helper wake-ups in {ROUNDS} flag waits");
    // The flags raised no event at b (writes do not).
    assert!(p.evd_b.wait(Some(Duration::from_millis(50)), 1).is_err());
}

#[test]
fn progress_until_drives_the_rails_pinned_and_inline() {
    // SAFETY: set before this test binary's only test starts a thread (or
    // opens an IA): nothing else reads the environment concurrently.
    unsafe { std::env::set_var("RMR_TCP_WATCH_MS", "60000") };
    flag_lands_in_the_waiters_context("pinned", 1);
    flag_lands_in_the_waiters_context("inline", 2);
}
