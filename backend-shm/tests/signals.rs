//! A signal that interrupts a connecting thread does not fail its connect.
//!
//! Found by the `shm_ring` fuzz campaign: libFuzzer's timer signal cut the
//! connecting side's wait for the peer's answer short (`poll` returned
//! `EINTR`), and `connect` failed with "poll the set-up socket:
//! Interrupted system call" although the peer went on to accept. A process
//! that takes signals (a profiler's timer, `SIGCHLD`, a runtime's
//! preemption signal) must not lose connections to them. Here a handler
//! that does nothing is installed for `SIGUSR1` (in this test binary
//! only) and the connecting thread gets one every 5 ms while the accepting
//! side takes 300 ms to answer.

use rmr_api::{EpEvds, EpState, Event};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

extern "C" fn nothing(_: libc::c_int) {}

#[test]
fn a_connect_interrupted_by_signals_still_connects() {
    // SAFETY: installs a handler that does nothing for SIGUSR1, which
    // nothing else in this test binary uses; no SA_RESTART, so a blocking
    // call it interrupts returns EINTR (poll would anyway).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = nothing as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    backend_shm::register();
    let ia_a = rmr_api::open("shm:signals").expect("open");
    let ia_b = rmr_api::open("shm:signals").expect("open");
    let (pz_a, pz_b) = (ia_a.create_pz().unwrap(), ia_b.create_pz().unwrap());
    let (evd_a, evd_b) = (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let psp_evd = ia_b.create_evd().unwrap();
    let psp = ia_b.create_psp(0, &psp_evd).unwrap();
    let a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let (addr, service) = (psp.address(), psp.service());
    let done = Arc::new(AtomicBool::new(false));
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let connector = {
        let (a, done) = (a.clone(), done.clone());
        std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
            let r = a.connect(&addr, service, b"hello", Duration::from_secs(20));
            done.store(true, Ordering::SeqCst);
            // Stays alive until the signals stopped (a signal aimed at a
            // thread that ended would reach whatever reuses its id).
            go_rx.recv().unwrap();
            r
        })
    };
    let tid = tid_rx.recv().unwrap();
    let acceptor = {
        let (ia_b, pz_b, evd_b) = (ia_b.clone(), pz_b.clone(), evd_b.clone());
        std::thread::spawn(move || match psp_evd.wait(Some(Duration::from_secs(20)), 1) {
            Ok(Event::ConnectionRequest(cr)) => {
                // The connecting side waits for the answer, taking signals.
                std::thread::sleep(Duration::from_millis(300));
                let ep = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
                cr.accept(&ep, b"welcome").expect("accept");
                ep
            }
            e => panic!("expected a connection request, got {e:?}"),
        })
    };
    let (start, mut sent) = (Instant::now(), 0u32);
    while !done.load(Ordering::SeqCst) {
        assert!(start.elapsed() < Duration::from_secs(30), "connect never returned");
        // SAFETY: `tid` is the connecting thread's, which waits for `go`
        // before it ends, so it is alive here.
        assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGUSR1) }, 0);
        sent += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    go_tx.send(()).unwrap();
    let reply = connector.join().unwrap().expect("connect, interrupted by signals");
    let b = acceptor.join().unwrap();
    assert_eq!(reply, b"welcome");
    assert!(sent >= 20, "only {sent} signals were sent during the connect");
    assert_eq!(a.state(), EpState::Connected);
    assert_eq!(b.state(), EpState::Connected);
}
