//! One-sided operations: RDMA write and read (gather, scatter, large,
//! checksummed), their ordering with sends, suppressed completions, the
//! fence, write with immediate data.

use super::*;

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

/// `Evd::progress_until` waits for a condition that raises no event: here a
/// flag the peer RDMA-writes, 20 times, with the writer's thread waiting
/// for its own completion meanwhile. It returns true only once the flag is
/// there, and the writes queue no event at the target.
pub fn progress_until_sees_a_written_flag(t: &Target) {
    let p = Pair::new(t);
    let flag = Buf::new(&p.pz_b, 8, RW, 0);
    let value = Buf::new(&p.pz_a, 8, RW, 0);
    for round in 1..=20u64 {
        value.mem.write(0, &round.to_le_bytes()).unwrap();
        let seen = || flag.bytes() == round.to_le_bytes();
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let ctx = flag.ctx();
                p.a.post_rdma_write(&[value.sge()], ctx.at(0), Cookie(round), F0).unwrap();
                expect_ok(&p.evd_a, round);
            });
            let began = std::time::Instant::now();
            assert!(
                p.evd_b.progress_until(Some(WAIT), None, &seen),
                "round {round}: the flag did not land within {WAIT:?}"
            );
            // A wait that slept through the flag sees it only in its last
            // look, at the deadline.
            assert!(
                began.elapsed() < WAIT / 2,
                "round {round}: the flag was seen only after {:?}",
                began.elapsed()
            );
            assert!(seen(), "round {round}: progress_until returned before the flag landed");
            // The write completes once the target acknowledges it: the
            // target keeps making progress until the writer is done.
            while !writer.is_finished() {
                p.evd_b.progress_until(Some(Duration::from_millis(1)), None, &|| false);
            }
            writer.join().unwrap();
        });
    }
    assert!(p.evd_b.dequeue().is_none(), "RDMA writes queued an event at the target");
}

/// A process reads its memory while a peer RDMA-writes it: side a writes
/// a 300-byte pattern (whole words and parts of words) into b's buffer
/// again and again, each write waited for, while a thread of b's process
/// reads that buffer through the region's accessors all along and b's
/// own thread waits for a's closing message (driving b's endpoint). The
/// backend's placing of the writes must not race those reads (the CI's
/// ThreadSanitizer pass runs this suite on the tcp, multirail and shm
/// backends; it cannot see a placement through a second mapping of the
/// same memory, as shm's shared regions are written); at the end b holds
/// the last pattern, seen once the message sent after it arrived (the
/// second ordering rule).
pub fn target_reads_while_peer_writes(t: &Target) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    // Long enough that the reads and the backend's placement take the
    // accessors' long-run path as well as their edge bytes.
    const LEN: usize = 300;
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, LEN + 3, RW, 0);
    let (src, note) = (Buf::new(&p.pz_a, LEN, RW, 0), Buf::new(&p.pz_b, 8, RW, 0));
    let rounds = t.n(200, 40) as u64;
    let (done, reads) = (AtomicBool::new(false), AtomicU64::new(0));
    // Ends the reader however the scope ends (a failed check panics).
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    p.b.post_recv(&[note.sge()], Cookie(1), F0).unwrap();
    std::thread::scope(|s| {
        let _stop = Stop(&done);
        let reader = s.spawn(|| {
            let mut b = [0u8; LEN];
            loop {
                target.mem.read(3, &mut b).unwrap();
                let _ = target.mem.load_u64(8).unwrap();
                reads.fetch_add(1, Ordering::SeqCst);
                if done.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::yield_now();
            }
        });
        // The writes race reads from the start.
        while reads.load(Ordering::SeqCst) == 0 && !reader.is_finished() {
            std::thread::yield_now();
        }
        let b_waits = s.spawn(|| expect_ok(&p.evd_b, 1));
        for i in 0..rounds {
            src.mem.write(0, &pattern(i, LEN)).unwrap();
            p.a.post_rdma_write(&[src.sge()], target.ctx().at(3), Cookie(10 + i), F0).unwrap();
            expect_ok(&p.evd_a, 10 + i);
        }
        p.a.post_send(&[src.part(0, 8)], Cookie(2), F0).unwrap();
        expect_ok(&p.evd_a, 2);
        b_waits.join().expect("side b's wait");
    });
    assert_eq!(target.mem.to_vec(3, LEN).unwrap(), pattern(rounds - 1, LEN));
    assert_eq!(target.mem.to_vec(0, 3).unwrap(), [0; 3], "bytes before the write changed");
}
