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

/// A thread that takes signals still connects and still gets its message:
/// the connecting thread is sent `SIGUSR1` (a handler that does nothing,
/// no `SA_RESTART`) every 5 ms while the peer takes 300 ms to accept, and
/// then while it waits on its EVD for a message the peer sends 300 ms
/// later. A blocking call a signal interrupts returns `EINTR`; a transport
/// must go on waiting for the rest of its time, as a process with a
/// profiler's timer or a runtime's preemption signal needs (the shm
/// backend's connect did not: RELIABILITY.md bug 18).
pub fn signals_interrupt_neither_connect_nor_wait(t: &Target) {
    use std::sync::atomic::{AtomicU8, Ordering};
    // The waiter's phase: connecting, waiting for the message, finished.
    const CONNECTING: u8 = 0;
    const WAITING: u8 = 1;
    const FINISHED: u8 = 2;
    let (ia_a, ia_b) = t.open();
    let (pz_a, pz_b) = (ia_a.create_pz().unwrap(), ia_b.create_pz().unwrap());
    let (evd_a, evd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let (cevd_a, cevd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let pevd = ia_b.create_evd().unwrap();
    let psp = ia_b.create_psp(0, &pevd).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    let a = ia_a.create_ep(&pz_a, &evds(&evd_a, &cevd_a)).unwrap();
    let into = Buf::new(&pz_a, 64, RW, 0);
    let from = Buf::new(&pz_b, 64, RW, 0x3c);
    let phase = AtomicU8::new(CONNECTING);
    let (sent, got, peer) = std::thread::scope(|s| {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (a, into, evd_a, phase, addr) = (&a, &into, &evd_a, &phase, &addr);
        let waiter = s.spawn(move || {
            tid_tx.send(super::super::signals::this_thread()).unwrap();
            let r = a.connect(addr, svc, b"signalled", WAIT).and_then(|_| {
                a.post_recv(&[into.sge()], Cookie(7), F0)?;
                phase.store(WAITING, Ordering::SeqCst);
                // Tells the peer that this thread is about to wait.
                a.post_send(&[], Cookie(8), DtoFlags::SUPPRESS)?;
                evd_a.wait(Some(WAIT), 1)
            });
            phase.store(FINISHED, Ordering::SeqCst);
            // Not joined before the signals stopped: its id stays valid.
            let _ = go_rx.recv();
            r
        });
        let tid = tid_rx.recv().unwrap();
        // The peer: it accepts late, then sends late (receives may be
        // posted before the connection exists).
        let peer = s.spawn(|| {
            let ev = pevd.wait(Some(WAIT), 1).expect("connection request");
            let Event::ConnectionRequest(cr) = ev else { panic!("{ev:?}") };
            std::thread::sleep(Duration::from_millis(300));
            let b = ia_b.create_ep(&pz_b, &evds(&evd_b, &cevd_b)).unwrap();
            b.post_recv(&[from.part(0, 8)], Cookie(9), F0).unwrap();
            cr.accept(&b, b"").expect("accept");
            expect_established(&cevd_b);
            expect_ok(&evd_b, 9); // the waiter is at its wait now
            std::thread::sleep(Duration::from_millis(300));
            b.post_send(&[from.sge()], Cookie(10), DtoFlags::SUPPRESS).unwrap();
            b
        });
        let start = Instant::now();
        // Signals sent while the waiter connected, and while it waited.
        let mut sent = [0u32; 2];
        loop {
            let p = phase.load(Ordering::SeqCst);
            if p == FINISHED || waiter.is_finished() {
                break;
            }
            assert!(start.elapsed() < 2 * WAIT, "the signalled thread never finished");
            // SAFETY: the waiter is joined only after this loop.
            unsafe { super::super::signals::interrupt(tid) };
            sent[p as usize] += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = go_tx.send(());
        let got = waiter.join().expect("the signalled thread");
        (sent, got, peer.join())
    });
    // The waiter's own outcome first: a failed connect also fails the peer.
    match got {
        Ok(Event::Dto(c)) => {
            assert!(c.status.is_ok() && c.cookie == Cookie(7) && c.bytes == 64, "{c:?}")
        }
        other => panic!("connect or wait failed under signals: {other:?}"),
    }
    let b = peer.expect("the peer");
    assert_eq!(into.bytes(), vec![0x3c; 64]);
    // Each phase lasted about 300 ms: at one signal every 5 ms, at least
    // one reached it whatever the load.
    assert!(sent[0] >= 1 && sent[1] >= 1, "signals sent while connecting, waiting: {sent:?}");
    let _ = b.disconnect();
    let _ = a.disconnect();
}
