//! Writes that ride in messages (backend-ofi's `eager` module) refused by
//! the receiver, over real `tcp` endpoints on loopback. A small suppressed
//! write with immediate always rides in its own message, so each case is
//! deterministic: a forged key, a region without the remote write right,
//! a range past the region's end, a deregistered region and a region of
//! another protection zone. Each time:
//! - the target's memory is untouched and its receive completes unfilled;
//! - the writer gets the refused write back, once, with its cookie and a
//!   typed status, then the connection's Broken event naming the refusal;
//! - nothing after the refused write is applied.
//!
//! And a suppressed write with a forged key followed by a send, held or
//! not: the writer gets it back with its cookie.

mod support;

use rmr_api::{
    Access, Cookie, DtoFlags, DtoOp, Ep, EpEvds, Evd, Event, Ia, Lmr, MemRegion, Psp, Pz,
    RemoteAddr, RmrContext, Sge, Status,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);

struct Pair {
    _ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
    a: Arc<dyn Ep>,
    aevd: Arc<dyn Evd>,
    b: Arc<dyn Ep>,
    bevd: Arc<dyn Evd>,
    _psp: Arc<dyn Psp>,
}

fn pair() -> Pair {
    backend_ofi::register();
    // Pinned: the cases need writes to ride (held: progress threads, corking)
    // and 64 KiB receives staged.
    let ia = rmr_api::open(
        "ofi:tcp:127.0.0.1;eager_max=88;bounce_max=65536;cork_max=16384;progress_thread=1",
    )
    .unwrap();
    let (pz, pevd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let (aevd, bevd) = (ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let a = ia.create_ep(&pz, &EpEvds::single(&aevd)).unwrap();
    let b = ia.create_ep(&pz, &EpEvds::single(&bevd)).unwrap();
    support::join(&a, &b, &psp, &pevd);
    support::established(&[&aevd, &bevd]);
    Pair { _ia: ia, pz, a, aevd, b, bevd, _psp: psp }
}

/// A region of `len` bytes of `fill` registered in `pz` with `access`.
fn region(
    pz: &Arc<dyn Pz>,
    len: usize,
    access: Access,
    fill: u8,
) -> (Arc<MemRegion>, Arc<dyn Lmr>) {
    let m = MemRegion::new(len);
    m.write(0, &vec![fill; len]).unwrap();
    let l = pz.register_all(&m, access).unwrap();
    (m, l)
}

/// The events of `evd` until its endpoint's Broken event (which ends the
/// list); panics after [`WAIT`].
fn until_broken(evd: &Arc<dyn Evd>) -> (Vec<Event>, String) {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match evd.wait(Some(left), 1) {
            Ok(Event::Broken { reason, .. }) => return (seen, reason),
            Ok(e) => seen.push(e),
            Err(e) => panic!("no Broken event ({e:?}); saw {seen:?}"),
        }
    }
}

/// Sends A's suppressed 8-byte write with immediate to `to`, which B
/// must refuse with `want`; checks both sides' reports and that `target`
/// kept its bytes.
fn refused(p: &Pair, to: RemoteAddr<'_>, want: Status, target: &Arc<MemRegion>) {
    let before = target.to_vec(0, target.len()).unwrap();
    let (rm, rl) = region(&p.pz, 64, Access::LOCAL_WRITE, 0xEE);
    p.b.post_recv(&[Sge::new(&*rl, 0, 64)], Cookie(1), DtoFlags::empty()).unwrap();
    p.b.post_recv(&[Sge::new(&*rl, 0, 64)], Cookie(2), DtoFlags::empty()).unwrap();
    let (_sm, sl) = region(&p.pz, 8, Access::empty(), 0x5A);
    let src = [Sge::new(&*sl, 0, 8)];
    p.a.post_rdma_write_imm(&src, to, 9, Cookie(77), DtoFlags::SUPPRESS).unwrap();
    // A message after the refused write: never delivered (the post itself
    // may find the connection already broken).
    let _ = p.a.post_send(&src, Cookie(78), DtoFlags::SUPPRESS);
    let (a_events, why) = until_broken(&p.aevd);
    let back: Vec<_> = a_events
        .iter()
        .filter_map(|e| match e {
            Event::Dto(c) if c.cookie == Cookie(77) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(back.len(), 1, "the refused write reported once: {a_events:?}");
    assert_eq!((back[0].op, back[0].status), (DtoOp::RdmaWrite, want), "{:?}", back[0]);
    assert!(why.contains("refused an RDMA write"), "A's reason: {why}");
    let (b_events, bwhy) = until_broken(&p.bevd);
    assert!(bwhy.contains("refused an RDMA write"), "B's reason: {bwhy}");
    for e in &b_events {
        if let Event::Dto(c) = e {
            assert!(!c.status.is_ok(), "B completed a receive after the refusal: {c:?}");
        }
    }
    assert_eq!(target.to_vec(0, target.len()).unwrap(), before, "refused write landed");
    assert_eq!(rm.to_vec(0, 64).unwrap(), vec![0xEE; 64], "a message after it landed");
}

#[test]
fn a_forged_key_is_refused() {
    let p = pair();
    let (t, tl) = region(&p.pz, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x33);
    let good = tl.rmr_context();
    let keys: Vec<u64> = good.keys().iter().map(|k| k ^ 0x5a5a_5a5a_0000_0001).collect();
    let forged = RmrContext::with_keys(&keys, good.addr, good.len).unwrap();
    refused(&p, forged.at(0), Status::BadKey, &t);
}

#[test]
fn a_region_without_the_remote_write_right_is_refused() {
    let p = pair();
    let (t, tl) = region(&p.pz, 64, Access::REMOTE_READ | Access::LOCAL_WRITE, 0x21);
    refused(&p, tl.rmr_context().at(0), Status::RemoteAccess, &t);
}

#[test]
fn a_range_past_the_region_is_refused() {
    let p = pair();
    let (t, tl) = region(&p.pz, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x44);
    // A forged context claiming a longer region: the target still refuses.
    let good = tl.rmr_context();
    let forged = RmrContext::with_keys(good.keys(), good.addr, good.len * 4).unwrap();
    refused(&p, forged.at(60), Status::OutOfBounds, &t);
}

#[test]
fn a_deregistered_region_is_refused() {
    let p = pair();
    let (t, tl) = region(&p.pz, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x55);
    let ctx = tl.rmr_context();
    tl.deregister().unwrap();
    refused(&p, ctx.at(0), Status::BadKey, &t);
}

#[test]
fn a_region_of_another_zone_is_refused() {
    let p = pair();
    let other = p._ia.create_pz().unwrap();
    let (t, tl) = region(&other, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x66);
    refused(&p, tl.rmr_context().at(0), Status::BadKey, &t);
}

/// A suppressed write with a forged key and a send right after it, as in
/// a write + notify ping-pong (held or written alone, as timing decides):
/// the writer gets it back with its cookie, the target is untouched.
#[test]
fn a_refused_write_before_a_send_is_reported_with_its_cookie() {
    let p = pair();
    let (t, tl) = region(&p.pz, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x77);
    let (_rm, rl) = region(&p.pz, 64, Access::LOCAL_WRITE, 0);
    let (_sm, sl) = region(&p.pz, 8, Access::empty(), 0x5A);
    let src = [Sge::new(&*sl, 0, 8)];
    // A round first, so the write follows a wait just left (it is held).
    p.b.post_recv(&[Sge::new(&*rl, 0, 64)], Cookie(1), DtoFlags::empty()).unwrap();
    p.a.post_send(&src, Cookie(2), DtoFlags::empty()).unwrap();
    for evd in [&p.aevd, &p.bevd] {
        match evd.wait(Some(WAIT), 1).unwrap() {
            Event::Dto(c) => c.result().unwrap(),
            e => panic!("{e:?}"),
        }
    }
    let good = tl.rmr_context();
    let keys: Vec<u64> = good.keys().iter().map(|k| k ^ 0x0101).collect();
    let forged = RmrContext::with_keys(&keys, good.addr, good.len).unwrap();
    p.b.post_recv(&[Sge::new(&*rl, 0, 64)], Cookie(3), DtoFlags::empty()).unwrap();
    p.a.post_rdma_write(&src, forged.at(0), Cookie(55), DtoFlags::SUPPRESS).unwrap();
    let _ = p.a.post_send(&src, Cookie(56), DtoFlags::SUPPRESS);
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match p.aevd.wait(Some(left), 1).expect("the refused write's report") {
            Event::Dto(c) if c.cookie == Cookie(55) => {
                // Riding in the send, the receiver refused it (BadKey);
                // written alone (not held, or a waiter or progress thread
                // posted it first), the provider did, and `tcp` ends the
                // connection, flushing it.
                assert!(matches!(c.status, Status::BadKey | Status::Flushed), "{c:?}");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(t.to_vec(0, 64).unwrap(), vec![0x77; 64], "the refused write landed");
    // Reported once.
    std::thread::sleep(Duration::from_millis(100));
    while let Some(e) = p.aevd.dequeue() {
        assert!(!matches!(&e, Event::Dto(c) if c.cookie == Cookie(55)), "again: {e:?}");
    }
}

/// A remote CQ data word as rmr's messages carry it.
fn cq_data(kind: u64, hlen: u64, imm: u32) -> u64 {
    kind << 62 | hlen << 32 | u64::from(imm)
}

fn le(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A 64-byte region of B's granting remote writes (filled with 0x11) and
/// a well-formed write entry of 8 bytes into its start, as A would send
/// it: type 1, length 8, id 0, key, address, cookie, data.
fn granted(p: &Pair) -> (Arc<MemRegion>, Vec<u8>, Arc<dyn Lmr>) {
    let (t, tl) = region(&p.pz, 64, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x11);
    let ctx = tl.rmr_context();
    let a = p.a.as_any().downcast_ref::<backend_ofi::OfiEp>().unwrap();
    let addr = backend_ofi::hostile::remote_addr(a, &ctx, 0);
    (t, le(&[1 | 8 << 8, ctx.keys()[0], addr, 7, u64::MAX]), tl)
}

/// The same write entry in a well-formed header is applied: the hostile
/// cases below would fail for what they mean to, not for the entry.
#[test]
fn a_well_formed_raw_header_is_applied() {
    let p = pair();
    let (t, good, _tl) = granted(&p);
    let a = p.a.as_any().downcast_ref::<backend_ofi::OfiEp>().unwrap();
    let (_rm, rl) = region(&p.pz, 64, Access::LOCAL_WRITE, 0xEE);
    p.b.post_recv(&[Sge::new(&*rl, 0, 64)], Cookie(1), DtoFlags::empty()).unwrap();
    backend_ofi::hostile::send_raw(a, &[good, b"hi".to_vec()].concat(), cq_data(0, 40, 0)).unwrap();
    match p.bevd.wait(Some(WAIT), 1).unwrap() {
        Event::Dto(c) => assert_eq!((c.status, c.bytes), (Status::Success, 2), "{c:?}"),
        e => panic!("{e:?}"),
    }
    assert_eq!(t.to_vec(0, 16).unwrap(), [[0xff; 8], [0x11; 8]].concat());
}

/// Messages whose header is malformed, sent past the backend's framing by
/// a hostile peer: the receiver breaks the connection, names it, and
/// applies nothing of the header (a well-formed write entry, naming a
/// region the receiver really granted, before the malformed one included).
#[test]
fn malformed_headers_break_the_receiver_and_apply_nothing() {
    for (what, recv_len) in [
        ("unknown entry", 64),
        ("an entry past the header", 64),
        ("a header longer than the message", 64),
        ("a header longer than 128 bytes", 64),
        ("reserved data bits", 64),
        ("an immediate without its length", 64),
        ("a large message with a short header", 100 << 10),
    ] {
        let p = pair();
        let (t, good, _tl) = granted(&p);
        let a = p.a.as_any().downcast_ref::<backend_ofi::OfiEp>().unwrap();
        let (payload, data) = match what {
            "unknown entry" => ([good.clone(), le(&[9])].concat(), cq_data(0, 48, 0)),
            "an entry past the header" => {
                ([good.clone(), le(&[1 | 64 << 8])].concat(), cq_data(0, 48, 0))
            }
            "a header longer than the message" => (good.clone(), cq_data(0, 48, 0)),
            "a header longer than 128 bytes" => (vec![0; 136], cq_data(0, 136, 0)),
            "reserved data bits" => (good.clone(), cq_data(0, 40, 0) | 1 << 45),
            "an immediate without its length" => (good.clone(), cq_data(2, 40, 5)),
            _ => ([good.clone(), vec![0; 200]].concat(), cq_data(0, 40, 0)),
        };
        let (rm, rl) = region(&p.pz, recv_len, Access::LOCAL_WRITE, 0xEE);
        p.b.post_recv(&[Sge::new(&*rl, 0, recv_len as u64)], Cookie(1), DtoFlags::empty()).unwrap();
        backend_ofi::hostile::send_raw(a, &payload, data).unwrap();
        let (events, why) = until_broken(&p.bevd);
        assert!(why.contains("malformed message"), "{what}: {why} ({events:?})");
        for e in &events {
            if let Event::Dto(c) = e {
                assert!(!c.status.is_ok(), "{what}: a receive completed: {c:?}");
            }
        }
        assert_eq!(t.to_vec(0, 64).unwrap(), vec![0x11; 64], "{what}: a write was applied");
        if recv_len == 64 {
            // (A receive posted in place takes what arrives, as any
            // oversize message fills it before its error.)
            assert_eq!(rm.to_vec(0, 64).unwrap(), vec![0xEE; 64], "{what}: the receive was filled");
        }
    }
}

/// A small write that rode in a message, then at once (nothing waited
/// for) an RDMA write and an RDMA read of the same bytes, 200 times: the
/// later write lands last and the read sees it, never the ride's older
/// value (the peer's provider serves the later write and read as it takes
/// them in, possibly before rmr read the message the ride came in).
#[test]
fn writes_that_rode_are_ordered_with_later_rdma_on_the_same_bytes() {
    let p = pair();
    let (t, tl) =
        region(&p.pz, 64, Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE, 0);
    let (rm, rl) = region(&p.pz, 64 * 8, Access::LOCAL_WRITE, 0);
    let (sm, sl) = region(&p.pz, 24, Access::LOCAL_WRITE, 0);
    let ctx = tl.rmr_context();
    let done = std::sync::atomic::AtomicBool::new(false);
    // Stops B's thread however the rounds end (a failed check panics).
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    for k in 0..8 {
        p.b.post_recv(&[Sge::new(&*rl, k * 64, 64)], Cookie(k), DtoFlags::empty()).unwrap();
    }
    std::thread::scope(|s| {
        // B takes the messages in (and posts their receives again).
        let b = s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                if let Ok(Event::Dto(c)) = p.bevd.wait(Some(Duration::from_millis(50)), 1) {
                    assert!(c.status.is_ok(), "{c:?}");
                    let sge = [Sge::new(&*rl, c.cookie.0 * 64, 64)];
                    p.b.post_recv(&sge, c.cookie, DtoFlags::empty()).unwrap();
                }
            }
        });
        let _stop = Stop(&done);
        for i in 0..200u64 {
            let (old, new) = (2 * i + 1, 2 * i + 2);
            sm.store_u64(0, old).unwrap();
            sm.store_u64(8, new).unwrap();
            let ride = [Sge::new(&*sl, 0, 8)];
            p.a.post_rdma_write_imm(&ride, ctx.at(0), 1, Cookie(1), DtoFlags::SUPPRESS).unwrap();
            p.a.post_rdma_write(&[Sge::new(&*sl, 8, 8)], ctx.at(0), Cookie(2), DtoFlags::empty())
                .unwrap();
            p.a.post_rdma_read(&[Sge::new(&*sl, 16, 8)], ctx.at(0), Cookie(3), DtoFlags::empty())
                .unwrap();
            let mut left = 2;
            while left > 0 {
                match p.aevd.wait(Some(WAIT), 1).expect("A's completions") {
                    Event::Dto(c) => {
                        assert!(c.status.is_ok(), "round {i}: {c:?}");
                        left -= 1;
                    }
                    e => panic!("round {i}: {e:?}"),
                }
            }
            assert_eq!(sm.load_u64(16).unwrap(), new, "round {i}: the read saw the ride's value");
            assert_eq!(t.load_u64(0).unwrap(), new, "round {i}: the ride landed last");
        }
        drop(_stop);
        b.join().unwrap();
    });
    let _ = rm;
}
