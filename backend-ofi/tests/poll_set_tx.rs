//! A transmit that waits for room in its socket while the sender sleeps on
//! a poll-set CQ (the `tcp` provider's default): the provider then wants
//! the socket watched for writing, and the mirror the sender sleeps on must
//! follow that change of events, or the transfer stalls. No progress
//! threads and no spin: only the two sleeping waiters move the data.
//!
//! Its own test binary: the spin setting is process-wide.

mod support;

use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
use std::time::{Duration, Instant};

/// Larger than loopback's socket buffers on both ends together.
const LEN: usize = 48 << 20;

#[test]
fn a_sender_asleep_while_its_socket_is_full_finishes() {
    // SAFETY: set before any thread starts or anything reads it.
    unsafe { std::env::set_var("RMR_EVD_SPIN_US", "0") };
    backend_ofi::register();
    if backend_ofi::libfabric_version() >= (1, 18) {
        eprintln!("skipped: libfabric >= 1.18 has no poll-set CQs here");
        return;
    }
    let spec = "ofi:tcp:127.0.0.1;progress_thread=0;poll_set=1";
    let (ia_a, ia_b) = (rmr_api::open(spec).unwrap(), rmr_api::open(spec).unwrap());
    let (pz_a, pz_b) = (ia_a.create_pz().unwrap(), ia_b.create_pz().unwrap());
    let (aevd, bevd, pevd) =
        (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let a = ia_a.create_ep(&pz_a, &EpEvds::single(&aevd)).unwrap();
    let b = ia_b.create_ep(&pz_b, &EpEvds::single(&bevd)).unwrap();
    let psp = ia_b.create_psp(0, &pevd).unwrap();
    support::join(&a, &b, &psp, &pevd);
    support::established(&[&aevd, &bevd]);
    assert_eq!(a.attr().note("ofi.cq_wait"), Some("poll set"));

    let bytes: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4093) as u8).collect();
    let src = MemRegion::from_bytes(&bytes);
    let dst = MemRegion::new(LEN);
    let (note_src, note_dst) = (MemRegion::from_bytes(b"done"), MemRegion::new(16));
    let sl = pz_a.register_all(&src, Access::empty()).unwrap();
    let nl = pz_a.register_all(&note_src, Access::empty()).unwrap();
    let dl = pz_b.register_all(&dst, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let ndl = pz_b.register_all(&note_dst, Access::LOCAL_WRITE).unwrap();
    let target = dl.rmr_context();
    b.post_recv(&[Sge::whole(&*ndl)], Cookie(9), DtoFlags::empty()).unwrap();

    // A sleep first, with nothing to send: the sender's mirror holds the
    // socket watched for reading only.
    assert!(matches!(aevd.wait(Some(Duration::from_millis(50)), 1), Err(rmr_api::Error::Timeout)));
    let started = Instant::now();
    std::thread::scope(|s| {
        // The target's waiter: its reads of the socket are the only ones.
        let receiver = s.spawn(|| bevd.wait(Some(Duration::from_secs(30)), 1));
        a.post_rdma_write(&[Sge::whole(&*sl)], target.at(0), Cookie(1), DtoFlags::SUPPRESS)
            .unwrap();
        a.post_send(&[Sge::whole(&*nl)], Cookie(2), DtoFlags::empty()).unwrap();
        // The sender sleeps while most of the write still waits for room.
        match aevd.wait(Some(Duration::from_secs(30)), 1) {
            Ok(Event::Dto(c)) => {
                assert_eq!(c.cookie, Cookie(2));
                c.result().unwrap();
            }
            other => panic!("the sender's transfer never finished: {other:?}"),
        }
        match receiver.join().unwrap() {
            Ok(Event::Dto(c)) => {
                assert_eq!(c.cookie, Cookie(9));
                c.result().unwrap();
            }
            other => panic!("the notice never arrived: {other:?}"),
        }
    });
    // Without the socket watched for writing, each stall lasts until a
    // wait's deadline (30 s); on loopback the transfer takes well under one.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the transfer stalled: {:?}",
        started.elapsed()
    );
    let mut got = vec![0u8; LEN];
    dst.read(0, &mut got).unwrap();
    assert!(got == bytes, "the written bytes arrived intact");
}
