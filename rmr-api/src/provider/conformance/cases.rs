//! The conformance cases. Each takes the [`Target`] and panics on failure.

use super::*;
use crate::{Caps, DtoFlags, DtoOp, EpState, Error, Sge, Status};
use crate::{CompareSwap, Cookie};
use std::time::Instant;

const F0: DtoFlags = DtoFlags::empty();
const RW: Access = Access::ALL;

fn skip(t: &Target, why: &str) {
    println!("SKIPPED: {} on {}: {why}", std::thread::current().name().unwrap_or("case"), t.name);
}

/// Waits for a connection event of the given kind on `cevd`.
fn expect_conn_event(cevd: &Arc<dyn Evd>, within: Duration, want: fn(&Event) -> bool) -> Event {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match cevd.wait(Some(left), 1) {
            Ok(e) if want(&e) => return e,
            Ok(_) => continue,
            Err(e) => panic!("no expected connection event within {within:?}: {e}"),
        }
    }
}

/// An error completion must arrive for `cookie` and the target must be unchanged.
fn expect_remote_fault(p: &Pair, cookie: u64, target: &Buf, before: &[u8]) -> DtoCompletion {
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie.0, cookie);
    assert!(!c.status.is_ok(), "a forbidden access succeeded: {c:?}");
    assert_eq!(target.bytes(), before, "target memory changed by a refused access");
    c
}

pub fn ia_attr_and_caps_tell_the_truth(t: &Target) {
    let p = Pair::new(t);
    let attr = p.ia_a.attr().clone();
    assert!(attr.max_msg_size >= 1 << 20, "max message {}", attr.max_msg_size);
    assert!(attr.max_sges >= 1 && attr.max_dtos >= 16);
    let l = Buf::new(&p.pz_a, 64, RW, 0);
    let r = Buf::new(&p.pz_b, 64, RW, 0);
    let ctx = r.ctx();
    // An absent capability must be an `Unsupported` error at post time, never silence.
    if !attr.caps.contains(Caps::RDMA_READ) {
        assert!(matches!(
            p.a.post_rdma_read(&[l.sge()], ctx.at(0), Cookie(1), F0),
            Err(Error::Unsupported(_))
        ));
    }
    if !attr.caps.contains(Caps::WRITE_IMM) {
        let e = p.a.post_rdma_write_imm(&[l.sge()], ctx.at(0), 1, Cookie(1), F0);
        assert!(matches!(e, Err(Error::Unsupported(_))));
    }
    if !attr.caps.contains(Caps::ATOMICS) {
        let e = p.a.post_fetch_add(l.part(0, 8), ctx.at(0), 1, Cookie(1), F0);
        assert!(matches!(e, Err(Error::Unsupported(_))));
    }
    assert_eq!(p.a.state(), EpState::Connected);
    assert_eq!(p.b.state(), EpState::Connected);
    assert!(p.a.peer_address().is_some());
}

pub fn connect_accept_private_data_both_ways(t: &Target) {
    // Pair::new asserts both private data directions and the Established events.
    let p = Pair::new(t);
    let (a2, b2) = p.connect_more(&p.pz_a, &p.evd_a, &p.cevd_a);
    assert_ne!(a2.id(), p.a.id());
    assert_ne!(b2.id(), p.b.id());
    assert_eq!(b2.state(), EpState::Connected);
}

pub fn connect_reject_private_data(t: &Target) {
    let (ia_a, ia_b) = t.open();
    let (pz_a, evd_a, pevd) =
        (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let psp = ia_b.create_psp(0, &pevd).unwrap();
    let ep = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    std::thread::scope(|s| {
        let ep2 = ep.clone();
        let h = s.spawn(move || ep2.connect(&addr, svc, b"let me in", WAIT));
        match pevd.wait(Some(WAIT), 1).unwrap() {
            Event::ConnectionRequest(cr) => {
                assert_eq!(cr.private_data(), b"let me in");
                cr.reject(b"go away").unwrap();
            }
            e => panic!("{e:?}"),
        }
        match h.join().unwrap() {
            Err(Error::Rejected { private_data }) => assert_eq!(private_data, b"go away"),
            other => panic!("expected Rejected, got {other:?}"),
        }
    });
    assert_ne!(ep.state(), EpState::Connected);
}

pub fn connect_refused_is_an_error(t: &Target) {
    let (ia_a, ia_b) = t.open();
    let pevd = ia_b.create_evd().unwrap();
    // Learn a free service id, then close it so nobody listens there.
    let psp = ia_b.create_psp(0, &pevd).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    psp.close();
    drop(psp);
    std::thread::sleep(Duration::from_millis(50));
    let (pz, evd) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep = ia_a.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let start = Instant::now();
    let r = ep.connect(&addr, svc, b"", Duration::from_secs(5));
    assert!(r.is_err(), "connect to a closed service succeeded");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_ne!(ep.state(), EpState::Connected);
}

pub fn connect_timeout_is_respected(t: &Target) {
    let (ia_a, ia_b) = t.open();
    let pevd = ia_b.create_evd().unwrap();
    let psp = ia_b.create_psp(0, &pevd).unwrap(); // nobody answers its requests
    let (pz, evd) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep = ia_a.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let start = Instant::now();
    let r = ep.connect(&psp.address(), psp.service(), b"", Duration::from_millis(400));
    let took = start.elapsed();
    assert!(matches!(r, Err(Error::Timeout)), "expected Timeout, got {r:?}");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(10), "took {took:?}");
    // The unanswered request is still there to be rejected.
    if let Ok(Event::ConnectionRequest(cr)) = pevd.wait(Some(Duration::from_secs(1)), 1) {
        let _ = cr.reject(b"");
    }
}

pub fn send_recv_basic(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 256, RW, 0);
    src.mem.write(0, &pattern(1, 256)).unwrap();
    let dst = Buf::new(&p.pz_b, 256, RW, 0xee);
    p.b.post_recv(&[dst.sge()], Cookie(10), F0).unwrap();
    p.a.post_send(&[src.sge()], Cookie(20), F0).unwrap();
    let c = expect_ok(&p.evd_b, 10);
    assert_eq!((c.op, c.bytes, c.ep), (DtoOp::Recv, 256, p.b.id()));
    let c = expect_ok(&p.evd_a, 20);
    assert_eq!((c.op, c.ep), (DtoOp::Send, p.a.id()));
    assert_eq!(dst.bytes(), pattern(1, 256));
}

pub fn send_recv_in_order_under_load(t: &Target) {
    let p = Pair::new(t);
    let n = t.n(10_000, 1000) as u64;
    const SLOTS: u64 = 64;
    const MAX: u64 = 2048;
    let rbuf = Buf::new(&p.pz_b, (SLOTS * MAX) as usize, RW, 0);
    for i in 0..SLOTS {
        p.b.post_recv(&[rbuf.part(i * MAX, MAX)], Cookie(i), F0).unwrap();
    }
    let sbuf = Buf::new(&p.pz_a, (SLOTS * MAX) as usize, RW, 0);
    let msg = |i: u64| {
        let len = 16 + (i * 37 % (MAX - 16));
        let mut m = i.to_le_bytes().to_vec();
        m.extend_from_slice(&pattern(i, len as usize - 16));
        let sum = checksum(&m);
        m.extend_from_slice(&sum.to_le_bytes());
        m
    };
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let mut outstanding = 0u64;
            for i in 0..n {
                if outstanding == SLOTS {
                    let c = next_dto(&p.evd_a);
                    assert!(c.status.is_ok(), "send failed: {c:?}");
                    outstanding -= 1;
                }
                let m = msg(i);
                let slot = i % SLOTS;
                sbuf.mem.write(slot * MAX, &m).unwrap();
                p.a.post_send(&[sbuf.part(slot * MAX, m.len() as u64)], Cookie(i), F0).unwrap();
                outstanding += 1;
            }
            for _ in 0..outstanding {
                assert!(next_dto(&p.evd_a).status.is_ok());
            }
        });
        for i in 0..n {
            let c = next_dto(&p.evd_b);
            assert!(c.status.is_ok(), "recv {i} failed: {c:?}");
            let slot = c.cookie.0;
            assert_eq!(slot, i % SLOTS, "receives completed out of order");
            let got = rbuf.mem.to_vec(slot * MAX, c.bytes as usize).unwrap();
            assert_eq!(got, msg(i), "message {i} corrupted or out of order");
            if i + SLOTS < n {
                p.b.post_recv(&[rbuf.part(slot * MAX, MAX)], Cookie(slot), F0).unwrap();
            }
        }
        sender.join().unwrap();
    });
}

pub fn zero_length_send(t: &Target) {
    let p = Pair::new(t);
    let dst = Buf::new(&p.pz_b, 64, RW, 7);
    p.b.post_recv(&[dst.sge()], Cookie(1), F0).unwrap();
    p.a.post_send(&[], Cookie(2), F0).unwrap();
    assert_eq!(expect_ok(&p.evd_b, 1).bytes, 0);
    expect_ok(&p.evd_a, 2);
    assert_eq!(dst.bytes(), vec![7; 64]);
}

pub fn solicited_flag_reaches_receiver(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 8, RW, 1);
    let dst = Buf::new(&p.pz_b, 16, RW, 0);
    p.b.post_recv(&[dst.part(0, 8)], Cookie(1), F0).unwrap();
    p.b.post_recv(&[dst.part(8, 8)], Cookie(2), F0).unwrap();
    p.a.post_send(&[src.sge()], Cookie(1), DtoFlags::SOLICITED | DtoFlags::SUPPRESS).unwrap();
    p.a.post_send(&[src.sge()], Cookie(2), DtoFlags::SUPPRESS).unwrap();
    assert!(expect_ok(&p.evd_b, 1).solicited);
    assert!(!expect_ok(&p.evd_b, 2).solicited);
}

pub fn recv_too_small_errors_nothing_overwritten(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 64, RW, 0x11);
    let dst = Buf::new(&p.pz_b, 64, RW, 0xAB);
    p.b.post_recv(&[dst.part(0, 16)], Cookie(5), F0).unwrap();
    p.a.post_send(&[src.sge()], Cookie(6), F0).unwrap();
    let c = next_dto(&p.evd_b);
    assert_eq!(c.cookie.0, 5);
    assert!(!c.status.is_ok(), "an oversize message was accepted: {c:?}");
    assert_eq!(dst.bytes(), vec![0xAB; 64], "receive buffer (or beyond) overwritten");
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie.0, 6);
    if p.ia_a.attr().caps.contains(Caps::OVERRUN_AT_SENDER) {
        assert!(!c.status.is_ok(), "the sender was not told: {c:?}");
    } else {
        skip(t, "the sender's error (provider lacks Caps::OVERRUN_AT_SENDER)");
    }
}

pub fn rdma_write_then_send_ordering(t: &Target) {
    let p = Pair::new(t);
    let len = 1 << 20;
    let target = Buf::new(&p.pz_b, len, RW, 0);
    let src = Buf::new(&p.pz_a, len, RW, 0);
    let note = Buf::new(&p.pz_b, 8, RW, 0);
    for round in 0..t.n(20, 4) as u64 {
        let pat = pattern(round, len);
        src.mem.write(0, &pat).unwrap();
        p.b.post_recv(&[note.sge()], Cookie(round), F0).unwrap();
        p.a.post_rdma_write(
            &[src.sge()],
            target.ctx().at(0),
            Cookie(100 + round),
            DtoFlags::SUPPRESS,
        )
        .unwrap();
        p.a.post_send(&[src.part(0, 8)], Cookie(200 + round), F0).unwrap();
        expect_ok(&p.evd_b, round);
        // Rule 2: the write is visible when the receive completes.
        assert_eq!(
            checksum(&target.bytes()),
            checksum(&pat),
            "round {round}: write not visible at recv"
        );
        expect_ok(&p.evd_a, 200 + round);
    }
}

pub fn rdma_write_large_checksummed(t: &Target) {
    let p = Pair::new(t);
    let len = t.n(16 << 20, 2 << 20);
    let target = Buf::new(&p.pz_b, len, RW, 0);
    let src = Buf::new(&p.pz_a, len, RW, 0);
    let pat = pattern(42, len);
    src.mem.write(0, &pat).unwrap();
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(9), F0).unwrap();
    assert_eq!(expect_ok(&p.evd_a, 9).bytes, len as u64);
    assert_eq!(checksum(&target.bytes()), checksum(&pat));
}

pub fn rdma_read(t: &Target) {
    let p = Pair::new(t);
    if !p.ia_a.attr().caps.contains(Caps::RDMA_READ) {
        return skip(t, "provider has no RDMA read");
    }
    let len = 300_000;
    let remote = Buf::new(&p.pz_b, len, Access::REMOTE_READ, 0);
    remote.mem.write(0, &pattern(3, len)).unwrap();
    let local = Buf::new(&p.pz_a, len, RW, 0);
    p.a.post_rdma_read(&[local.part(0, 1000)], remote.ctx().at(5000), Cookie(1), F0).unwrap();
    p.a.post_rdma_read(&[local.sge()], remote.ctx().at(0), Cookie(2), F0).unwrap();
    assert_eq!(expect_ok(&p.evd_a, 1).op, DtoOp::RdmaRead);
    let c = expect_ok(&p.evd_a, 2);
    assert_eq!(c.bytes, len as u64);
    assert_eq!(local.bytes(), pattern(3, len));
}

pub fn rdma_write_gather(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 300, RW, 0);
    let src2 = Buf::new(&p.pz_a, 100, RW, 0);
    src.mem.write(0, &pattern(1, 300)).unwrap();
    src2.mem.write(0, &pattern(2, 100)).unwrap();
    let target = Buf::new(&p.pz_b, 1000, RW, 0xff);
    let segs = [src.part(200, 100), src2.sge(), src.part(0, 50)];
    p.a.post_rdma_write(&segs, target.ctx().at(10), Cookie(1), F0).unwrap();
    assert_eq!(expect_ok(&p.evd_a, 1).bytes, 250);
    let mut want = vec![0xff; 1000];
    want[10..110].copy_from_slice(&pattern(1, 300)[200..300]);
    want[110..210].copy_from_slice(&pattern(2, 100));
    want[210..260].copy_from_slice(&pattern(1, 300)[0..50]);
    assert_eq!(target.bytes(), want);
}

pub fn rdma_read_scatter(t: &Target) {
    let p = Pair::new(t);
    if !p.ia_a.attr().caps.contains(Caps::RDMA_READ) {
        return skip(t, "provider has no RDMA read");
    }
    let remote = Buf::new(&p.pz_b, 400, Access::REMOTE_READ, 0);
    remote.mem.write(0, &pattern(5, 400)).unwrap();
    let l1 = Buf::new(&p.pz_a, 100, RW, 0);
    let l2 = Buf::new(&p.pz_a, 300, RW, 0);
    p.a.post_rdma_read(
        &[l1.sge(), l2.part(0, 50), l2.part(250, 50)],
        remote.ctx().at(100),
        Cookie(1),
        F0,
    )
    .unwrap();
    expect_ok(&p.evd_a, 1);
    let pat = pattern(5, 400);
    assert_eq!(l1.bytes(), &pat[100..200]);
    assert_eq!(l2.mem.to_vec(0, 50).unwrap(), &pat[200..250]);
    assert_eq!(l2.mem.to_vec(250, 50).unwrap(), &pat[250..300]);
    assert_eq!(l2.mem.to_vec(50, 200).unwrap(), vec![0; 200]);
}

pub fn send_gather_recv_scatter(t: &Target) {
    let p = Pair::new(t);
    let s = Buf::new(&p.pz_a, 1000, RW, 0);
    s.mem.write(0, &pattern(8, 1000)).unwrap();
    let r1 = Buf::new(&p.pz_b, 100, RW, 0);
    let r2 = Buf::new(&p.pz_b, 1000, RW, 0);
    p.b.post_recv(&[r1.sge(), r2.sge()], Cookie(1), F0).unwrap();
    p.a.post_send(&[s.part(500, 500), s.part(0, 100)], Cookie(2), F0).unwrap();
    assert_eq!(expect_ok(&p.evd_b, 1).bytes, 600);
    let pat = pattern(8, 1000);
    let mut got = r1.bytes();
    got.extend_from_slice(&r2.mem.to_vec(0, 500).unwrap());
    let mut want = pat[500..1000].to_vec();
    want.extend_from_slice(&pat[0..100]);
    assert_eq!(got, want);
    expect_ok(&p.evd_a, 2);
}

pub fn rmr_context_exchanged_by_send(t: &Target) {
    let p = Pair::new(t);
    // b advertises a region by sending its context; a decodes it and writes.
    let target = Buf::new(&p.pz_b, 4096, RW, 0);
    let adv = Buf::new(&p.pz_b, RmrContext::WIRE_SIZE, RW, 0);
    adv.mem.write(0, &target.ctx().to_bytes()).unwrap();
    let inbox = Buf::new(&p.pz_a, RmrContext::WIRE_SIZE, RW, 0);
    p.a.post_recv(&[inbox.sge()], Cookie(1), F0).unwrap();
    p.b.post_send(&[adv.sge()], Cookie(2), F0).unwrap();
    expect_ok(&p.evd_a, 1);
    expect_ok(&p.evd_b, 2);
    let ctx = RmrContext::from_bytes(&inbox.bytes()).unwrap();
    assert_eq!(ctx, target.ctx());
    let src = Buf::new(&p.pz_a, 4096, RW, 0x5a);
    p.a.post_rdma_write(&[src.sge()], ctx.at(0), Cookie(3), F0).unwrap();
    expect_ok(&p.evd_a, 3);
    assert_eq!(target.bytes(), vec![0x5a; 4096]);
}

pub fn suppress_no_event_but_implied(t: &Target) {
    let p = Pair::new(t);
    let n = 10u64;
    let target = Buf::new(&p.pz_b, (n as usize + 1) * 4096, RW, 0);
    let src = Buf::new(&p.pz_a, (n as usize + 1) * 4096, RW, 0);
    src.mem.write(0, &pattern(9, (n as usize + 1) * 4096)).unwrap();
    for i in 0..n {
        p.a.post_rdma_write(
            &[src.part(i * 4096, 4096)],
            target.ctx().at(i * 4096),
            Cookie(i),
            DtoFlags::SUPPRESS,
        )
        .unwrap();
    }
    p.a.post_rdma_write(&[src.part(n * 4096, 4096)], target.ctx().at(n * 4096), Cookie(99), F0)
        .unwrap();
    let c = expect_ok(&p.evd_a, 99);
    assert_eq!(c.op, DtoOp::RdmaWrite);
    // The one signalled completion implies every earlier write landed.
    assert_eq!(target.bytes(), src.bytes());
    std::thread::sleep(Duration::from_millis(50));
    assert!(p.evd_a.dequeue().is_none(), "a suppressed DTO produced an event");
}

pub fn suppressed_error_still_reported(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 64, Access::REMOTE_READ, 3);
    let src = Buf::new(&p.pz_a, 64, RW, 4);
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(7), DtoFlags::SUPPRESS).unwrap();
    expect_remote_fault(&p, 7, &target, &[3; 64]);
}

pub fn barrier_fence_orders_read_before_write(t: &Target) {
    let p = Pair::new(t);
    if !p.ia_a.attr().caps.contains(Caps::RDMA_READ) {
        return skip(t, "provider has no RDMA read");
    }
    let remote = Buf::new(&p.pz_b, 8, RW, 0xAA);
    let got = Buf::new(&p.pz_a, 8, RW, 0);
    let newv = Buf::new(&p.pz_a, 8, RW, 0xBB);
    p.a.post_rdma_read(&[got.sge()], remote.ctx().at(0), Cookie(1), F0).unwrap();
    p.a.post_rdma_write(&[newv.sge()], remote.ctx().at(0), Cookie(2), DtoFlags::BARRIER_FENCE)
        .unwrap();
    expect_ok(&p.evd_a, 1);
    expect_ok(&p.evd_a, 2);
    assert_eq!(got.bytes(), vec![0xAA; 8], "the fenced write overtook the read");
    assert_eq!(remote.bytes(), vec![0xBB; 8]);
}

pub fn write_with_immediate(t: &Target) {
    let p = Pair::new(t);
    if !p.ia_a.attr().caps.contains(Caps::WRITE_IMM) {
        return skip(t, "provider has no write with immediate");
    }
    let target = Buf::new(&p.pz_b, 4096, RW, 0);
    let src = Buf::new(&p.pz_a, 1000, RW, 0x77);
    let dummy = Buf::new(&p.pz_b, 8, RW, 0);
    p.b.post_recv(&[dummy.sge()], Cookie(1), F0).unwrap();
    p.a.post_rdma_write_imm(&[src.sge()], target.ctx().at(96), 0xC0FFEE, Cookie(2), F0).unwrap();
    let c = expect_ok(&p.evd_b, 1);
    assert_eq!(c.op, DtoOp::RecvWriteImm);
    assert_eq!(c.imm, Some(0xC0FFEE));
    // The data is in place when the immediate arrives.
    assert_eq!(target.mem.to_vec(96, 1000).unwrap(), vec![0x77; 1000]);
    assert_eq!(target.mem.to_vec(0, 96).unwrap(), vec![0; 96]);
    expect_ok(&p.evd_a, 2);
}

fn atomics_or_skip(t: &Target, p: &Pair) -> bool {
    if p.ia_a.attr().caps.contains(Caps::ATOMICS) {
        true
    } else {
        skip(t, "provider has no atomics");
        false
    }
}

pub fn fetch_add_racing_initiators(t: &Target) {
    let p = Pair::new(t);
    if !atomics_or_skip(t, &p) {
        return;
    }
    let (evd2, cevd2) = (p.ia_a.create_evd().unwrap(), p.ia_a.create_evd().unwrap());
    let (a2, _b2) = p.connect_more(&p.pz_a, &evd2, &cevd2);
    let word = Buf::new(&p.pz_b, 64, RW, 0);
    word.mem.store_u64(8, 1000).unwrap();
    let n = t.n(500, 100) as u64;
    let run = |ep: &Arc<dyn Ep>, evd: &Arc<dyn Evd>| {
        let res = Buf::new(&p.pz_a, 8, RW, 0);
        let mut olds = Vec::new();
        for i in 0..n {
            ep.post_fetch_add(res.sge(), word.ctx().at(8), 1, Cookie(i), F0).unwrap();
            let c = expect_ok(evd, i);
            assert_eq!(c.op, DtoOp::FetchAdd);
            let old = u64::from_le_bytes(res.bytes().try_into().unwrap());
            assert_eq!(c.imm, Some(old), "result buffer and completion disagree");
            olds.push(old);
        }
        olds
    };
    let (o1, o2) = std::thread::scope(|s| {
        let h = s.spawn(|| run(&a2, &evd2));
        let o1 = run(&p.a, &p.evd_a);
        (o1, h.join().unwrap())
    });
    assert_eq!(word.mem.load_u64(8).unwrap(), 1000 + 2 * n, "an increment was lost");
    let mut all: Vec<u64> = o1.into_iter().chain(o2).collect();
    all.sort_unstable();
    let want: Vec<u64> = (1000..1000 + 2 * n).collect();
    assert_eq!(all, want, "two fetch-adds saw the same old value");
}

pub fn cmp_swap_racing_initiators(t: &Target) {
    let p = Pair::new(t);
    if !atomics_or_skip(t, &p) {
        return;
    }
    let (evd2, cevd2) = (p.ia_a.create_evd().unwrap(), p.ia_a.create_evd().unwrap());
    let (a2, _b2) = p.connect_more(&p.pz_a, &evd2, &cevd2);
    let word = Buf::new(&p.pz_b, 16, RW, 0);
    let k = t.n(300, 60) as u64;
    // Each initiator increments the word k times with a CAS retry loop.
    let run = |ep: &Arc<dyn Ep>, evd: &Arc<dyn Evd>| {
        let res = Buf::new(&p.pz_a, 8, RW, 0);
        let (mut guess, mut cookie, mut wins) = (0u64, 0u64, 0u64);
        while wins < k {
            ep.post_cmp_swap(
                res.sge(),
                word.ctx().at(0),
                CompareSwap { compare: guess, swap: guess + 1 },
                Cookie(cookie),
                F0,
            )
            .unwrap();
            let c = expect_ok(evd, cookie);
            cookie += 1;
            let old = c.imm.expect("old value");
            if old == guess {
                wins += 1;
                guess += 1;
            } else {
                guess = old;
            }
        }
    };
    std::thread::scope(|s| {
        let h = s.spawn(|| run(&a2, &evd2));
        run(&p.a, &p.evd_a);
        h.join().unwrap();
    });
    assert_eq!(word.mem.load_u64(0).unwrap(), 2 * k, "a compare-and-swap increment was lost");
}

pub fn atomic_misaligned_is_rejected(t: &Target) {
    let p = Pair::new(t);
    if !atomics_or_skip(t, &p) {
        return;
    }
    let word = Buf::new(&p.pz_b, 16, RW, 9);
    let res = Buf::new(&p.pz_a, 8, RW, 0);
    match p.a.post_fetch_add(res.sge(), word.ctx().at(3), 1, Cookie(1), F0) {
        Err(_) => {}
        Ok(()) => {
            let c = next_dto(&p.evd_a);
            assert!(!c.status.is_ok(), "misaligned atomic succeeded");
        }
    }
    assert_eq!(word.bytes(), vec![9; 16]);
}

pub fn bad_key(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 4096, RW, 0x33);
    let src = Buf::new(&p.pz_a, 4096, RW, 0x44);
    let good = target.ctx();
    let keys: Vec<u64> = good.keys().iter().map(|k| k ^ 0x5a5a_5a5a_0000_0001).collect();
    let forged = RmrContext::with_keys(&keys, good.addr, good.len).unwrap();
    p.a.post_rdma_write(&[src.sge()], forged.at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x33; 4096]);
}

pub fn out_of_bounds_remote(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 4096, RW, 0x33);
    let guard = Buf::new(&p.pz_b, 4096, RW, 0x66);
    let src = Buf::new(&p.pz_a, 8192, RW, 0x44);
    let good = target.ctx();
    // A forged context claiming a longer region: the target must still refuse.
    let forged = RmrContext::with_keys(good.keys(), good.addr, good.len * 4).unwrap();
    p.a.post_rdma_write(&[src.part(0, 100)], forged.at(4090), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x33; 4096]);
    assert_eq!(guard.bytes(), vec![0x66; 4096]);
    let before = Pair::new(t);
    drop(before);
}

pub fn out_of_bounds_local_rejected_at_post(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 4096, RW, 0);
    let src = Buf::new(&p.pz_a, 100, RW, 0);
    let r = p.a.post_rdma_write(&[src.part(50, 51)], target.ctx().at(0), Cookie(1), F0);
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    let r = p.a.post_rdma_write(&[src.sge()], target.ctx().at(4000), Cookie(1), F0);
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    let r = p.a.post_recv(&[src.part(0, 101)], Cookie(1), F0);
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    assert!(p.evd_a.dequeue().is_none());
}

pub fn missing_remote_write_right(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 512, Access::REMOTE_READ | Access::LOCAL_WRITE, 0x21);
    let src = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x21; 512]);
}

pub fn read_of_write_only_region(t: &Target) {
    let p = Pair::new(t);
    if !p.ia_a.attr().caps.contains(Caps::RDMA_READ) {
        return skip(t, "provider has no RDMA read");
    }
    let target = Buf::new(&p.pz_b, 512, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x21);
    let dst = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_read(&[dst.sge()], target.ctx().at(0), Cookie(1), F0).unwrap();
    let c = next_dto(&p.evd_a);
    assert!(!c.status.is_ok(), "read of a write-only region succeeded");
    assert_eq!(dst.bytes(), vec![0x99; 512], "refused read still delivered data");
}

pub fn lmr_of_another_pz(t: &Target) {
    let p = Pair::new(t);
    let other_pz = p.ia_b.create_pz().unwrap();
    let target = Buf::new(&other_pz, 512, RW, 0x21);
    let src = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x21; 512]);
}

pub fn deregistered_lmr(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 512, RW, 0x21);
    let ctx = target.ctx();
    target.lmr.deregister().unwrap();
    assert!(!target.lmr.is_registered());
    let src = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_write(&[src.sge()], ctx.at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x21; 512]);
}

pub fn local_lmr_of_another_pz_rejected(t: &Target) {
    let p = Pair::new(t);
    let other = p.ia_a.create_pz().unwrap();
    let src = Buf::new(&other, 64, RW, 0);
    let target = Buf::new(&p.pz_b, 64, RW, 0);
    let r = p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(1), F0);
    assert!(matches!(r, Err(Error::Protection(_))), "{r:?}");
    let r = p.a.post_recv(&[src.sge()], Cookie(1), F0);
    assert!(matches!(r, Err(Error::Protection(_))), "{r:?}");
}

pub fn disconnect_events_both_sides(t: &Target) {
    let p = Pair::new(t);
    p.a.disconnect().unwrap();
    let is_disc = |e: &Event| matches!(e, Event::Disconnected { .. });
    expect_conn_event(&p.cevd_a, WAIT, is_disc);
    expect_conn_event(&p.cevd_b, WAIT, is_disc);
    assert_eq!(p.a.state(), EpState::Disconnected);
    assert_eq!(p.b.state(), EpState::Disconnected);
}

/// `close` right after posting: everything posted (suppressed sends after
/// a suppressed RDMA write) reaches the peer before the disconnect.
pub fn close_delivers_what_was_posted(t: &Target) {
    let p = Pair::new(t);
    const N: u64 = 32;
    let len = t.n(1 << 20, 64 << 10);
    let src = Buf::new(&p.pz_a, len, RW, 0);
    let dst = Buf::new(&p.pz_b, len, RW, 0);
    src.mem.write(0, &pattern(17, len)).unwrap();
    let msgs = Buf::new(&p.pz_a, N as usize * 8, RW, 0);
    let inbox = Buf::new(&p.pz_b, N as usize * 8, RW, 0);
    for i in 0..N {
        msgs.mem.write(i * 8, &i.to_le_bytes()).unwrap();
        p.b.post_recv(&[inbox.part(i * 8, 8)], Cookie(i), F0).unwrap();
    }
    let ctx = dst.ctx();
    p.a.post_rdma_write(&[src.sge()], ctx.at(0), Cookie(100), DtoFlags::SUPPRESS).unwrap();
    for i in 0..N {
        p.a.post_send(&[msgs.part(i * 8, 8)], Cookie(i), DtoFlags::SUPPRESS).unwrap();
    }
    p.a.close(WAIT).unwrap();
    for i in 0..N {
        let c = next_dto(&p.evd_b);
        assert_eq!((c.cookie.0, c.status), (i, Status::Success), "{c:?}");
    }
    assert_eq!(checksum(&dst.mem.to_vec(0, len).unwrap()), checksum(&pattern(17, len)));
    expect_conn_event(&p.cevd_b, WAIT, |e| matches!(e, Event::Disconnected { .. }));
}

pub fn recvs_flushed_on_disconnect(t: &Target) {
    let p = Pair::new(t);
    let dst = Buf::new(&p.pz_b, 64, RW, 0);
    for i in 0..3 {
        p.b.post_recv(&[dst.part(i * 8, 8)], Cookie(i), F0).unwrap();
    }
    p.a.disconnect().unwrap();
    for i in 0..3 {
        let c = next_dto(&p.evd_b);
        assert_eq!(c.cookie.0, i);
        assert_eq!(c.status, Status::Flushed, "{c:?}");
    }
}

pub fn post_after_disconnect_is_error(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 64, RW, 0);
    p.a.disconnect().unwrap();
    expect_conn_event(&p.cevd_a, WAIT, |e| matches!(e, Event::Disconnected { .. }));
    assert!(p.a.post_send(&[src.sge()], Cookie(1), F0).is_err());
    assert!(p.a.disconnect().is_err(), "second disconnect should say not connected");
}

pub fn evd_wait_timeout(t: &Target) {
    let (ia, _) = t.open();
    let evd = ia.create_evd().unwrap();
    let start = Instant::now();
    assert!(matches!(evd.wait(Some(Duration::from_millis(30)), 1), Err(Error::Timeout)));
    assert!(start.elapsed() >= Duration::from_millis(25));
    assert!(evd.dequeue().is_none());
}

pub fn evd_wait_threshold(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 8, RW, 0);
    let dst = Buf::new(&p.pz_b, 32, RW, 0);
    for i in 0..4 {
        p.b.post_recv(&[dst.part(i * 8, 8)], Cookie(i), F0).unwrap();
    }
    // Fewer than the threshold: times out, and nothing is lost.
    p.a.post_send(&[src.sge()], Cookie(0), DtoFlags::SUPPRESS).unwrap();
    assert!(matches!(p.evd_b.wait(Some(Duration::from_millis(200)), 4), Err(Error::Timeout)));
    for i in 1..4 {
        p.a.post_send(&[src.sge()], Cookie(i), DtoFlags::SUPPRESS).unwrap();
    }
    let first = p.evd_b.wait(Some(WAIT), 4).unwrap();
    assert_eq!(first.as_dto().map(|c| c.cookie), Some(Cookie(0)));
    assert_eq!(p.evd_b.len(), 3, "threshold reached means all four were queued");
}

pub fn evd_software_events(t: &Target) {
    let (ia, _) = t.open();
    let evd = ia.create_evd().unwrap();
    evd.post_software(11).unwrap();
    evd.post_software(12).unwrap();
    assert_eq!(evd.len(), 2);
    assert!(matches!(evd.wait(Some(WAIT), 1), Ok(Event::Software(11))));
    assert!(matches!(evd.dequeue(), Some(Event::Software(12))));
    // Another thread's software event wakes a blocked waiter.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            evd.post_software(13).unwrap();
        });
        assert!(matches!(evd.wait(Some(WAIT), 1), Ok(Event::Software(13))));
    });
}

pub fn many_eps_share_one_evd(t: &Target) {
    let p = Pair::new(t);
    let n_eps = t.n(16, 4);
    let per = 50u64;
    let mut pairs = vec![(p.a.clone(), p.b.clone())];
    while pairs.len() < n_eps {
        pairs.push(p.connect_more(&p.pz_a, &p.evd_a, &p.cevd_a));
    }
    let rbuf = Buf::new(&p.pz_b, n_eps * per as usize * 16, RW, 0);
    let sbuf = Buf::new(&p.pz_a, n_eps * per as usize * 16, RW, 0);
    for (e, (_, b)) in pairs.iter().enumerate() {
        for i in 0..per {
            let off = (e as u64 * per + i) * 16;
            b.post_recv(&[rbuf.part(off, 16)], Cookie(e as u64 * 1000 + i), F0).unwrap();
        }
    }
    for i in 0..per {
        for (e, (a, _)) in pairs.iter().enumerate() {
            let off = (e as u64 * per + i) * 16;
            sbuf.mem
                .write(off, &[(e as u64 * 1000 + i).to_le_bytes(), [0xEE; 8]].concat())
                .unwrap();
            a.post_send(&[sbuf.part(off, 16)], Cookie(i), DtoFlags::SUPPRESS).unwrap();
        }
    }
    let mut next = vec![0u64; n_eps];
    for _ in 0..n_eps as u64 * per {
        let c = next_dto(&p.evd_b);
        assert!(c.status.is_ok());
        let e = pairs.iter().position(|(_, b)| b.id() == c.ep).expect("completion names its EP");
        assert_eq!(c.cookie.0, e as u64 * 1000 + next[e], "per-EP order broken on a shared EVD");
        let off = c.cookie.0 % 1000 * 16 + e as u64 * per * 16;
        let got = rbuf.mem.to_vec(off, 8).unwrap();
        assert_eq!(u64::from_le_bytes(got.try_into().unwrap()), c.cookie);
        next[e] += 1;
    }
}

pub fn threads_posting_on_one_ep(t: &Target) {
    let p = Pair::new(t);
    let threads = 4u64;
    let per = t.n(500, 100) as u64;
    let total = threads * per;
    let rbuf = Buf::new(&p.pz_b, 16 * 256, RW, 0);
    for s in 0..256 {
        p.b.post_recv(&[rbuf.part(s * 16, 16)], Cookie(s), F0).unwrap();
    }
    std::thread::scope(|s| {
        for th in 0..threads {
            let p = &p;
            s.spawn(move || {
                let buf = Buf::new(&p.pz_a, 16 * per as usize, RW, 0);
                for i in 0..per {
                    buf.mem.write(i * 16, &[th.to_le_bytes(), i.to_le_bytes()].concat()).unwrap();
                    loop {
                        match p.a.post_send(
                            &[buf.part(i * 16, 16)],
                            Cookie(th << 32 | i),
                            DtoFlags::SUPPRESS,
                        ) {
                            Ok(()) => break,
                            Err(Error::QueueFull) => std::thread::yield_now(),
                            Err(e) => panic!("post: {e}"),
                        }
                    }
                }
                // Keep the source alive until everything is acknowledged.
                buf
            });
        }
        let mut next = vec![0u64; threads as usize];
        for n in 0..total {
            let c = next_dto(&p.evd_b);
            assert!(c.status.is_ok());
            let slot = c.cookie.0;
            let v = rbuf.mem.to_vec(slot * 16, 16).unwrap();
            let th = u64::from_le_bytes(v[0..8].try_into().unwrap()) as usize;
            let i = u64::from_le_bytes(v[8..16].try_into().unwrap());
            assert!(th < threads as usize, "garbled message");
            assert_eq!(i, next[th], "thread {th}'s sends arrived out of order");
            next[th] += 1;
            if n + 256 < total {
                p.b.post_recv(&[rbuf.part(slot * 16, 16)], Cookie(slot), F0).unwrap();
            }
        }
    });
}

pub fn window_backpressure_is_a_value(t: &Target) {
    let p = Pair::new(t);
    let max = p.a.attr().max_dtos as u64;
    let target = Buf::new(&p.pz_b, 4096, RW, 0);
    let src = Buf::new(&p.pz_a, 4096, RW, 1);
    let mut full = 0;
    let posts = (2 * max).min(t.n(20_000, 2_000) as u64);
    for i in 0..posts {
        match p.a.post_rdma_write(
            &[src.part(i % 512 * 8, 8)],
            target.ctx().at(i % 512 * 8),
            Cookie(i),
            DtoFlags::SUPPRESS,
        ) {
            Ok(()) => {}
            Err(Error::QueueFull) => {
                full += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("unexpected error under load: {e}"),
        }
    }
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(u64::MAX), F0).unwrap_or_else(
        |_| {
            // Still full: drain by waiting until a retry succeeds.
            let start = Instant::now();
            loop {
                match p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(u64::MAX), F0) {
                    Ok(()) => break,
                    Err(Error::QueueFull) if start.elapsed() < WAIT => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        },
    );
    expect_ok(&p.evd_a, u64::MAX);
    assert_eq!(target.bytes(), vec![1; 4096]);
    println!("window {max}: {full} QueueFull answers out of {posts} posts");
}

/// Child role of [`peer_killed_broken_event`]: connect, then wait to be killed.
fn peer_child(t: &Target, addr: &str, service: u16) {
    let (ia, _) = t.open();
    let (pz, evd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    ep.connect(addr, service, b"child", WAIT).expect("child connect");
    let buf = Buf::new(&pz, 64, RW, 0);
    ep.post_recv(&[buf.sge()], Cookie(1), F0).unwrap();
    println!("child connected");
    std::thread::sleep(Duration::from_secs(60));
    std::process::exit(3);
}

pub fn peer_killed_broken_event(t: &Target, test_name: &str) {
    if let Ok(v) = std::env::var("RMR_CONFORMANCE_CHILD") {
        let (addr, svc) = v.rsplit_once('|').expect("addr|service");
        return peer_child(t, addr, svc.parse().unwrap());
    }
    let (_, ia) = t.open();
    let (pz, evd, cevd, pevd) = (
        ia.create_pz().unwrap(),
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
    );
    let psp = ia.create_psp(0, &pevd).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("RMR_CONFORMANCE_CHILD", format!("{}|{}", psp.address(), psp.service()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let (ep, pd) = accept_one(
        &ia,
        &pz,
        &pevd,
        &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() },
        b"",
    );
    assert_eq!(pd, b"child");
    expect_established(&cevd);
    let buf = Buf::new(&pz, 64, RW, 0);
    ep.post_recv(&[buf.sge()], Cookie(42), F0).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    child.kill().unwrap();
    let killed = Instant::now();
    let _ = child.wait();
    let e = expect_conn_event(&cevd, Duration::from_secs(15), |e| {
        matches!(e, Event::Broken { .. } | Event::Disconnected { .. })
    });
    assert!(matches!(e, Event::Broken { .. }), "a killed peer is a broken connection, got {e:?}");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15), "broken event after {took:?}");
    let c = next_dto(&evd);
    assert_eq!(c.cookie.0, 42);
    assert!(!c.status.is_ok(), "posted receive not flushed: {c:?}");
    assert_eq!(ep.state(), EpState::Broken);
    assert!(ep.post_send(&[buf.sge()], Cookie(1), F0).is_err());
    println!("broken event {took:?} after the peer was killed");
}

#[allow(dead_code)]
fn _sge_is_copy(s: Sge<'_>) -> (Sge<'_>, Sge<'_>) {
    (s, s)
}
