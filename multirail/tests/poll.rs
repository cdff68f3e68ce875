//! A zero-timeout wait on a multirail EVD (a poll, as a runtime makes
//! between the steps of a computation) drives the rails' sockets once:
//! an RDMA read a peer aims at this process is answered in the polling
//! thread's own context. A poll that only harvested the rail EVDs left the
//! read to the rails' progress helpers, which took the endpoint over a
//! wake-up or more later: side b's helpers, told apart by name, are
//! counted. Their periodic looks are made rare (`RMR_TCP_WATCH_MS`, set
//! once before any IA opens; this file is its own test binary). Real TCP
//! rails on loopback.

use rmr_api::Cookie;
use rmr_api::provider::conformance::helper::thread_switches;
use rmr_api::provider::conformance::{Buf, Pair, Target, expect_ok};
use rmr_api::{Access, DtoFlags, Error};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const RW: Access = Access::ALL;

fn register() {
    backend_tcp::register();
    multirail::register();
}

/// Side a's thread reads side b's memory while b's thread only polls its
/// EVD (zero-timeout waits, nothing to deliver to b).
/// Side b's rails are on 127.0.`net`.x, side a's on 127.0.0.x: b's helper
/// threads are told apart by name (Linux keeps 15 bytes of it).
fn reads_are_answered_by_the_poller(engine: &str, net: u8) {
    let a = format!("multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine={engine}");
    let b = format!("multirail:tcp:127.0.{net}.1,tcp:127.0.{net}.2;engine={engine}");
    let helper = format!("rmr-tcp-127.0.{net}");
    let t = Target::new("multirail-poll", register, &a, &b);
    let p = Pair::new(&t);
    let page = Buf::new(&p.pz_b, 4096, RW, 0);
    let copy = Buf::new(&p.pz_a, 4096, RW, 0);
    const ROUNDS: u64 = 400;
    let (woken0, helpers) = thread_switches(&helper);
    assert!(helpers > 0, "side b's rails have progress helpers ({helper}...)");
    let mut polls = 0u64;
    for round in 1..=ROUNDS {
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
    // b's polls answered the reads: about 20 helper wake-ups in all, however
    // many reads (the endpoints' first looks; 18-27 were seen). Polls that
    // never read the sockets left every read to the helpers: at least one
    // wake-up each.
    let woken = thread_switches(&helper).0.saturating_sub(woken0);
    println!("RESULT {engine}: b's helpers woke {woken} times in {ROUNDS} reads ({polls} polls)");
    assert!(woken < ROUNDS / 4, "{woken} helper wake-ups for {ROUNDS} reads");
}

#[test]
fn zero_timeout_waits_answer_reads_pinned_and_inline() {
    // SAFETY: set before this test binary's only test starts a thread (or
    // opens an IA): nothing else reads the environment concurrently.
    unsafe { std::env::set_var("RMR_TCP_WATCH_MS", "60000") };
    reads_are_answered_by_the_poller("pinned", 3);
    reads_are_answered_by_the_poller("inline", 4);
}
