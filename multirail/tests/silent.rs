//! Sends the user suppressed go "silent" on their rail (SUPPRESS there too,
//! no acknowledgement of their own) once the rail has seen an RDMA write
//! (where a probe may go), and complete when a later DTO of that rail
//! completes. These tests drive every way such a send must still end:
//! implied by a later signalled DTO, by a probe for a fully fenced DTO, by
//! a probe for a completion held behind it, and by a window of nothing but
//! suppressed sends. Small suppressed writes (up to 1 KiB) go silent the
//! same way. Real TCP rails on loopback, both engines.

use rmr_api::Cookie;
use rmr_api::provider::conformance::{
    Buf, Pair, Target, ep_count, expect_ok, next_dto, pattern, write_send_ping_pong,
};
use rmr_api::{Access, DtoFlags, DtoOp, Error};
use std::time::Duration;

const RW: Access = Access::ALL;

fn register() {
    backend_tcp::register();
    multirail::register();
}

fn target(engine: &str) -> Target {
    let s = format!("multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine={engine};policy=even");
    Target::new("multirail-silent", register, &s, &s)
}

/// One suppressed write (the rails learn a probe target), then `n`
/// suppressed 16-byte sends numbered from `first`, with receives posted.
fn silent_sends(p: &Pair, rbuf: &Buf, sbuf: &Buf, first: u64, n: u64) {
    for i in 0..n {
        let slot = (first + i) % 256;
        p.b.post_recv(&[rbuf.part(slot * 16, 16)], Cookie(first + i), DtoFlags::empty()).unwrap();
    }
    for i in 0..n {
        let k = first + i;
        let slot = k % 256;
        sbuf.mem.write(slot * 16, &k.to_le_bytes()).unwrap();
        loop {
            match p.a.post_send(
                &[sbuf.part(slot * 16, 16)],
                Cookie(1 << 40 | k),
                DtoFlags::SUPPRESS,
            ) {
                Ok(()) => break,
                Err(Error::QueueFull) => std::thread::yield_now(),
                Err(e) => panic!("post: {e}"),
            }
        }
    }
}

/// The receiver gets `n` messages in order, each carrying its number.
fn receive_in_order(p: &Pair, rbuf: &Buf, first: u64, n: u64) {
    for i in 0..n {
        let c = next_dto(&p.evd_b);
        assert_eq!(c.op, DtoOp::Recv);
        assert!(c.status.is_ok(), "{c:?}");
        assert_eq!(c.cookie.0, first + i, "receives out of order");
        let mut b = [0u8; 8];
        rbuf.mem.read((c.cookie.0 % 256) * 16, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), c.cookie, "wrong payload");
    }
}

fn no_event(p: &Pair) {
    std::thread::sleep(Duration::from_millis(30));
    if let Some(e) = p.evd_a.dequeue() {
        panic!("a suppressed DTO produced an event: {e:?}");
    }
}

fn run(engine: &str) {
    let t = target(engine);
    let p = Pair::new(&t);
    let remote = Buf::new(&p.pz_b, 1 << 20, RW, 0);
    let local = Buf::new(&p.pz_a, 1 << 20, RW, 0);
    local.mem.write(0, &pattern(5, 1 << 20)).unwrap();
    let rbuf = Buf::new(&p.pz_b, 16 * 256, RW, 0);
    let sbuf = Buf::new(&p.pz_a, 16 * 256, RW, 0);

    // The rails learn where a probe may go.
    p.a.post_rdma_write(&[local.sge()], remote.ctx().at(0), Cookie(1), DtoFlags::SUPPRESS).unwrap();

    // 1. Implied by a later signalled DTO (a 64-byte write: whole, one rail).
    silent_sends(&p, &rbuf, &sbuf, 0, 100);
    p.a.post_rdma_write(&[local.part(0, 64)], remote.ctx().at(0), Cookie(2), DtoFlags::empty())
        .unwrap();
    assert_eq!(expect_ok(&p.evd_a, 2).op, DtoOp::RdmaWrite);
    receive_in_order(&p, &rbuf, 0, 100);
    no_event(&p);

    // 2. Held behind: a striped 1 MiB write completes on both rails while
    //    silent sends wait ahead of it; it must still be reported.
    silent_sends(&p, &rbuf, &sbuf, 100, 50);
    p.a.post_rdma_write(&[local.sge()], remote.ctx().at(0), Cookie(3), DtoFlags::empty()).unwrap();
    expect_ok(&p.evd_a, 3);
    receive_in_order(&p, &rbuf, 100, 50);
    assert_eq!(remote.bytes(), local.bytes());
    no_event(&p);

    // 3. A fully fenced read after silent sends: the fence needs every
    //    rail to report, probes make them.
    silent_sends(&p, &rbuf, &sbuf, 150, 40);
    let got = Buf::new(&p.pz_a, 4096, RW, 0);
    p.a.post_rdma_read(&[got.sge()], remote.ctx().at(4096), Cookie(4), DtoFlags::BARRIER_FENCE)
        .unwrap();
    expect_ok(&p.evd_a, 4);
    assert_eq!(got.bytes(), local.bytes()[4096..8192].to_vec());
    receive_in_order(&p, &rbuf, 150, 40);
    no_event(&p);

    // 4. Small suppressed writes go silent too: a fenced read sees them
    //    all, and a later signalled send reports only itself.
    let small = Buf::new(&p.pz_a, 64 * 100, RW, 0);
    small.mem.write(0, &pattern(11, 64 * 100)).unwrap();
    for i in 0..100u64 {
        p.a.post_rdma_write(
            &[small.part(i * 64, 64)],
            remote.ctx().at(65536 + i * 64),
            Cookie(1 << 41 | i),
            DtoFlags::SUPPRESS,
        )
        .unwrap();
    }
    let back = Buf::new(&p.pz_a, 64 * 100, RW, 0);
    p.a.post_rdma_read(&[back.sge()], remote.ctx().at(65536), Cookie(6), DtoFlags::BARRIER_FENCE)
        .unwrap();
    expect_ok(&p.evd_a, 6);
    assert_eq!(back.bytes(), small.bytes(), "a fenced read missed a silent write");
    no_event(&p);

    // 5. Nothing but suppressed sends, far more than a rail may carry
    //    silently: every one arrives, in order, and the window never jams.
    for round in 0..8u64 {
        let first = 1000 + round * 200;
        silent_sends(&p, &rbuf, &sbuf, first, 200);
        receive_in_order(&p, &rbuf, first, 200);
    }
    // A last signalled send reports only itself.
    p.b.post_recv(&[rbuf.part(0, 16)], Cookie(9), DtoFlags::empty()).unwrap();
    p.a.post_send(&[sbuf.part(0, 16)], Cookie(5), DtoFlags::empty()).unwrap();
    assert_eq!(expect_ok(&p.evd_a, 5).op, DtoOp::Send);
    expect_ok(&p.evd_b, 9);
    no_event(&p);

    // The silent path was the one taken, probes included.
    let (silent, probes) = (ep_count(&*p.a, "silent"), ep_count(&*p.a, "probes"));
    println!("{engine}: silent DTOs {silent}, probes {probes}");
    let notes = p.a.attr().notes;
    assert!(silent >= 64, "sends were not silent: {notes:?}");
    assert!(probes >= 1, "no probe was needed: {notes:?}");
}

#[test]
fn silent_sends_inline() {
    run("inline");
}

#[test]
fn silent_sends_pinned() {
    run("pinned");
}

/// The latency pattern: each side answers the other's suppressed 8-byte
/// write and suppressed send with its own. A rail signals one DTO in a
/// window of silent ones (its completion implies them all), not every DTO
/// posted while that one's acknowledgement is on its way back: well over
/// 94% of the DTOs go silent (one window is 32; signalling every DTO
/// posted until the first completion came back made it ~89%).
#[test]
fn ping_pong_signals_one_dto_per_window() {
    const ROUNDS: u64 = 600;
    let t = target("pinned");
    let p = Pair::new(&t);
    write_send_ping_pong(&p, ROUNDS);
    for (side, ep) in [("a", &p.a), ("b", &p.b)] {
        let silent = ep_count(&**ep, "silent");
        let dtos = 2 * ROUNDS;
        println!("{side}: {silent} of {dtos} DTOs silent");
        assert!(
            silent * 100 >= dtos * 94,
            "{side}: {silent} of {dtos} silent: {:?}",
            ep.attr().notes
        );
    }
}
