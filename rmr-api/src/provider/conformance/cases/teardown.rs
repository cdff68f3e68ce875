//! Teardown: disconnect events on both sides, close delivers what was
//! posted, receives flushed, posts after disconnect refused, a killed
//! peer reported as broken.

use super::*;

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
    if let Ok(v) = std::env::var("RMR_TEST_CONFORMANCE_CHILD") {
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
        .env("RMR_TEST_CONFORMANCE_CHILD", format!("{}|{}", psp.address(), psp.service()))
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
