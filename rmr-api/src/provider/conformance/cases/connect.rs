//! Attributes and connection set-up: the IA tells the truth, private data
//! travels both ways, refusals, rejections and timeouts are errors.

use super::*;

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

/// [`Ep::connect_start`]: the connection ends in `Established` on the
/// connection EVD (with the peer's private data) and carries data; a
/// refused one ends in an error (returned, or a `Broken` event).
pub fn connect_start_ends_in_an_event(t: &Target) {
    let (ia_a, ia_b) = t.open();
    let (pz_a, pz_b) = (ia_a.create_pz().unwrap(), ia_b.create_pz().unwrap());
    let (evd_a, evd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let (cevd_a, cevd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let pevd = ia_b.create_evd().unwrap();
    let psp = ia_b.create_psp(0, &pevd).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    let a = ia_a.create_ep(&pz_a, &evds(&evd_a, &cevd_a)).unwrap();
    let b = std::thread::scope(|s| {
        // (Transports that connect before returning need the accept meanwhile.)
        let h = s.spawn(|| accept_one(&ia_b, &pz_b, &pevd, &evds(&evd_b, &cevd_b), b"from-b"));
        a.connect_start(&addr, svc, b"from-a", WAIT).expect("connect_start");
        let (b, pd) = h.join().unwrap();
        assert_eq!(pd, b"from-a");
        b
    });
    match cevd_a.wait(Some(WAIT), 1).expect("the outcome") {
        Event::Established { private_data, .. } => assert_eq!(private_data, b"from-b"),
        e => panic!("expected Established, got {e:?}"),
    }
    expect_established(&cevd_b);
    assert_eq!(a.state(), EpState::Connected);
    let (src, dst) = (Buf::new(&pz_a, 64, RW, 0x5a), Buf::new(&pz_b, 64, RW, 0));
    b.post_recv(&[dst.sge()], Cookie(1), F0).unwrap();
    a.post_send(&[src.sge()], Cookie(2), F0).unwrap();
    expect_ok(&evd_b, 1);
    assert_eq!(dst.bytes(), vec![0x5a; 64]);
    // Refused: nobody listens there any more.
    psp.close();
    drop(psp);
    std::thread::sleep(Duration::from_millis(50));
    let c = ia_a.create_ep(&pz_a, &evds(&evd_a, &cevd_a)).unwrap();
    match c.connect_start(&addr, svc, b"", Duration::from_secs(5)) {
        Err(_) => {}
        Ok(()) => match cevd_a.wait(Some(WAIT), 1).expect("the refusal") {
            Event::Broken { .. } => {}
            e => panic!("expected Broken for a refused connect, got {e:?}"),
        },
    }
    assert_ne!(c.state(), EpState::Connected);
}
