//! A peer that breaks the protocol: corrupt ring indices, unknown frames,
//! payload longer than its request, frames overrunning the ring, writes
//! outside or without the rights granted, and a region table that lies.
//! The honest side answers with typed errors (a refused request, or a
//! `Broken` connection naming the protocol error), never crashes, and never
//! writes outside what it granted. Also replays the `shm_ring` fuzz
//! target's kept inputs.

use backend_shm::hostile::{LEN, Rig};
use backend_shm::wire::{Hdr, Op};
use rmr_api::{Access, Cookie, DtoFlags, EpState, Event, MemRegion, RmrContext, Sge, Status};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn rig() -> Rig {
    static N: AtomicU32 = AtomicU32::new(0);
    Rig::new(&format!("hostile{}x{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

fn broken_with(out: &backend_shm::hostile::Outcome, what: &str) {
    assert_eq!(out.state, EpState::Broken, "{out:?}");
    let reason = out
        .events
        .iter()
        .find_map(|e| match e {
            Event::Broken { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .expect("a Broken event");
    assert!(reason.contains("protocol error") && reason.contains(what), "{reason}");
}

#[test]
fn corrupt_ring_indices_break_the_connection() {
    let r = rig();
    r.inject(&[], 1 << 40);
    let out = r.settle(Duration::from_secs(5));
    broken_with(&out, "indices");
    // The receives it had posted end too (flushed), none completes twice.
    let flushed = out
        .events
        .iter()
        .filter(|e| matches!(e, Event::Dto(c) if c.status == Status::Flushed))
        .count();
    assert_eq!(flushed, 4, "{out:?}");
    r.check();
}

#[test]
fn an_unknown_frame_breaks_the_connection() {
    let r = rig();
    let mut h = Hdr::new(Op::Send);
    h.op = 200;
    r.inject(&Rig::frame(&h), 64);
    broken_with(&r.settle(Duration::from_secs(5)), "unknown frame op 200");
    r.check();
}

#[test]
fn a_frame_overrunning_the_ring_breaks_the_connection() {
    let r = rig();
    let mut h = Hdr::new(Op::Write);
    h.len = 1 << 30;
    h.total = 1 << 30;
    r.inject(&Rig::frame(&h), 64);
    broken_with(&r.settle(Duration::from_secs(5)), "overruns");
    r.check();
}

#[test]
fn payload_longer_than_its_request_breaks_before_a_byte_lands() {
    let r = rig();
    let mut h = Hdr::new(Op::Write);
    h.key = r.key(0);
    h.addr = r.addr(0);
    h.total = 8;
    h.len = 64;
    let mut f = Rig::frame(&h);
    f.extend_from_slice(&[0xff; 64]);
    r.inject(&f, 128);
    broken_with(&r.settle(Duration::from_secs(5)), "more payload");
    assert!(r.open.to_vec(0, LEN as usize).unwrap().iter().all(|&b| b == 0), "bytes landed");
    r.check();
}

#[test]
fn writes_outside_or_without_rights_are_refused_and_the_connection_lives() {
    let r = rig();
    let mut bytes = Vec::new();
    // Over the end of the open region; into the read-only one; a bad key.
    for (key, addr) in
        [(r.key(0), r.addr(0) + LEN - 8), (r.key(1), r.addr(1)), (r.key(0) ^ 1 << 40, r.addr(0))]
    {
        let mut h = Hdr::new(Op::Write);
        (h.key, h.addr, h.total, h.len) = (key, addr, 64, 64);
        bytes.extend(Rig::frame(&h));
        bytes.extend_from_slice(&[0xff; 64]);
    }
    // Then one that is allowed, so the ring still flows.
    let mut h = Hdr::new(Op::Write);
    (h.key, h.addr, h.total, h.len) = (r.key(0), r.addr(0), 8, 8);
    bytes.extend(Rig::frame(&h));
    bytes.extend_from_slice(&[0xab; 64]);
    let n = bytes.len() as u64;
    r.inject(&bytes, n);
    let _ = r.settle(Duration::from_millis(200));
    assert_eq!(r.honest.state(), EpState::Connected);
    let open = r.open.to_vec(0, LEN as usize).unwrap();
    assert_eq!(&open[..8], &[0xab; 8], "the allowed write did not land");
    assert!(open[8..].iter().all(|&b| b == 0), "a refused write landed");
    r.check();
}

#[test]
fn a_lying_region_table_gives_a_typed_error() {
    let r = rig();
    // The peer claims its region spans unmapped low memory.
    // SAFETY: 0x1000 is never mapped (below vm.mmap_min_addr): the write
    // the lie invites can only fault.
    unsafe { r.lie_in_table(0x1000, 1 << 40) };
    let ctx = RmrContext::new(r.evil_key(), 0x1000, 1 << 40);
    // Large enough to go by cross-memory attach, checked against the table.
    let src = MemRegion::new(64 << 10);
    let lmr = r.pz.register_all(&src, Access::empty()).unwrap();
    r.honest
        .post_rdma_write(&[Sge::whole(&*lmr)], ctx.at(0), Cookie(9), DtoFlags::empty())
        .unwrap();
    let out = r.settle(Duration::from_secs(5));
    let c = out
        .events
        .iter()
        .find_map(|e| e.as_dto().filter(|c| c.cookie.0 == 9))
        .copied()
        .expect("a completion");
    assert_eq!(c.status, Status::RemoteAccess, "{c:?}");
    assert_eq!(r.honest.state(), EpState::Connected);
    r.check();
}

#[test]
fn a_table_that_lies_about_a_shared_regions_file_gives_a_typed_error() {
    let r = rig();
    let ctx = r.lmrs[4].rmr_context();
    let src = MemRegion::from_vec(vec![0xab; 64]);
    let lmr = r.pz.register_all(&src, Access::empty()).unwrap();
    let write = |cookie: u64| {
        r.honest
            .post_rdma_write(&[Sge::whole(&*lmr)], ctx.at(64), Cookie(cookie), DtoFlags::empty())
            .unwrap();
        let out = r.settle(Duration::from_secs(5));
        out.events
            .iter()
            .find_map(|e| e.as_dto().filter(|c| c.cookie.0 == cookie))
            .copied()
            .expect("a completion")
    };
    // Honest: a mapped copy into the peer's file.
    assert_eq!(write(1).status, Status::Success);
    assert_eq!(r.evil_shared.to_vec(64, 64).unwrap(), vec![0xab; 64]);
    let mapped = r.honest.attr().notes.into_iter().find(|(k, _)| k == "shared_files_mapped");
    let mapped = mapped.map(|(_, v)| v).unwrap_or_default();
    if let Some(why) = mapped.strip_prefix("none: ") {
        println!("SKIPPED: this machine refuses pidfd_getfd ({why}); no mapped copy to attack");
        return;
    }
    assert_eq!(mapped, "1");
    // The entry now places the region past the end of its file.
    r.lie_about_file(1 << 30, 0);
    assert_eq!(write(2).status, Status::RemoteAccess);
    // And names a file the descriptor is not: the honest side does not map
    // it, and writes by cross-memory attach to the address the entry gives.
    r.evil_shared.fill(0, LEN, 0).unwrap();
    r.lie_about_file(0, 1);
    assert_eq!(write(3).status, Status::Success);
    assert_eq!(r.evil_shared.to_vec(64, 64).unwrap(), vec![0xab; 64]);
    // And names the honest side's own region table (a descriptor of this
    // process, read-only): not mapped, so the table is not written; the
    // write goes by cross-memory attach to the peer's real region.
    r.evil_shared.fill(0, LEN, 0).unwrap();
    let table = r.honest_table_digest();
    r.lie_file_is_the_honest_table();
    assert_eq!(write(4).status, Status::Success);
    assert_eq!(r.evil_shared.to_vec(64, 64).unwrap(), vec![0xab; 64]);
    assert_eq!(r.honest_table_digest(), table, "the honest side's region table was written");
    let mapped = r.honest.attr().notes.into_iter().find(|(k, _)| k == "shared_files_mapped");
    assert_eq!(mapped.map(|(_, v)| v).as_deref(), Some("1"), "nothing more mapped");
    assert_eq!(r.honest.state(), EpState::Connected);
    r.check();
}

#[test]
fn replay_shm_ring() {
    let files =
        rmr_api::provider::conformance::regression_inputs(env!("CARGO_MANIFEST_DIR"), "shm_ring");
    assert!(!files.is_empty(), "no shm_ring regression inputs");
    for (path, data) in &files {
        let r = rig();
        let out = r.feed(data);
        println!("{}: {:?}, {} events", path.display(), out.state, out.events.len());
    }
}

#[test]
fn a_write_spanning_frames_stops_at_deregistration() {
    deregistered_mid_write(false);
}

#[test]
fn a_write_with_immediate_stopped_at_deregistration_completes_its_receive() {
    deregistered_mid_write(true);
}

/// Injects frame `h` with 64 payload bytes of `fill`, and lets the honest
/// side take it in.
fn frame_of_64(r: &Rig, h: &Hdr, fill: u8) -> backend_shm::hostile::Outcome {
    let mut f = Rig::frame(h);
    f.extend_from_slice(&[fill; 64]);
    let n = f.len() as u64;
    r.inject(&f, n);
    r.settle(Duration::from_millis(200))
}

fn deregistered_mid_write(imm: bool) {
    let r = rig();
    // The first frame of a 128-byte write into the open region lands...
    let mut h = Hdr::new(Op::Write);
    (h.key, h.addr, h.total, h.len) = (r.key(0), r.addr(0), 128, 64);
    if imm {
        h.flags |= backend_shm::wire::IMM;
        h.arg = 77;
    }
    let _ = frame_of_64(&r, &h, 0xaa);
    assert_eq!(r.open.to_vec(0, 64).unwrap(), vec![0xaa; 64], "the first frame did not land");
    // ...then the region is deregistered, then the rest comes.
    r.lmrs[0].deregister().unwrap();
    let mut c = Hdr::new(Op::Cont);
    c.len = 64;
    let out = frame_of_64(&r, &c, 0xbb);
    assert_eq!(r.honest.state(), EpState::Connected, "a refused write ended the connection");
    let open = r.open.to_vec(0, LEN as usize).unwrap();
    assert!(open[64..].iter().all(|&b| b == 0), "a frame landed after deregistration");
    if imm {
        // The receive the immediate took completes, refused, and only once.
        let done: Vec<_> = out
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Dto(c) if c.op == rmr_api::DtoOp::RecvWriteImm => Some(c.status),
                _ => None,
            })
            .collect();
        assert_eq!(done, [Status::RemoteAccess], "{out:?}");
    }
    r.check();
}

/// An honest peer's cross-memory write may still run when this side has
/// let its endpoint go: a deregistration after that waits for it (the
/// region could be freed right after), as it does on a live connection.
#[test]
fn a_deregistration_waits_for_a_peer_whose_endpoint_this_side_let_go() {
    use rmr_api::provider::conformance::{Buf, Pair, Target};
    use std::sync::atomic::AtomicBool;
    let t = Target::new("shm", backend_shm::register, "shm:departed", "shm:departed");
    let p = Pair::new(&t);
    let target = Buf::new(&p.pz_b, 4096, Access::ALL, 0);
    // Side a is inside a cross-memory write into b's memory...
    let busy = backend_shm::hostile::pretend_in_flight(&p.a);
    // ...when b disconnects and drops its endpoint.
    p.b.disconnect().unwrap();
    let Pair { b, a, .. } = p;
    drop(b);
    std::thread::sleep(Duration::from_millis(100));
    let released = std::sync::Arc::new(AtomicBool::new(false));
    let seen = released.clone();
    let dereg = std::thread::spawn(move || {
        target.lmr.deregister().unwrap();
        seen.load(Ordering::SeqCst)
    });
    std::thread::sleep(Duration::from_millis(300));
    released.store(true, Ordering::SeqCst);
    drop(busy);
    assert!(dereg.join().unwrap(), "the deregistration returned while the peer's access ran");
    drop(a);
}
