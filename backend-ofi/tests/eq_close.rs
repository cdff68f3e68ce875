//! Endpoints closed while their connection events are still queued on the
//! IA's event queue, on the `tcp` and `sockets` providers: both ends of
//! each connection are dropped at once, right after it is up, so a peer's
//! FI_SHUTDOWN (or the endpoint's own FI_CONNECTED) sits in the queue while
//! the endpoint closes. libfabric's `sockets` provider takes such an
//! endpoint's events out of the queue when it closes, and an event read
//! running at that moment took an entry from an empty list and freed a
//! pointer into the queue itself (the process aborted with "free():
//! invalid pointer"); the backend now never reads that queue while an
//! endpoint of its IA closes. The rounds must all connect, and the process
//! must live through them. (The abort came in about 3 of 100 runs of the
//! conformance suite; this churn did not bring it about more often.)
//!
//! And errors that wait together: on `sockets` the gated queue's fd goes
//! quiet once an error is read with no plain event queued, even when more
//! errors wait behind it, so the reader reads again after every event
//! (and once a slice whatever the fd says). Several connections rejected
//! while the reader is held back must each end `Rejected`, none in its own
//! timeout.

use rmr_api::{EpEvds, EpState, Error, Event};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);
/// Rounds per provider.
const ROUNDS: usize = 20;
/// Connections opened, then dropped together, per round.
const PAIRS: usize = 16;

fn churn(prov: &str) {
    backend_ofi::register();
    let ia = rmr_api::open(&format!("ofi:{prov}:127.0.0.1")).unwrap();
    let (pz, pevd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    for round in 0..ROUNDS {
        let mut eps = Vec::new();
        for _ in 0..PAIRS {
            let (cevd, sevd) = (ia.create_evd().unwrap(), ia.create_evd().unwrap());
            let client = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
            let server = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
            std::thread::scope(|s| {
                let c = client.clone();
                let addr = addr.clone();
                let h = s.spawn(move || c.connect(&addr, svc, b"hi", WAIT));
                let deadline = Instant::now() + WAIT;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match pevd.wait(Some(left), 1) {
                        Ok(Event::ConnectionRequest(cr)) => {
                            cr.accept(&server, b"ok").unwrap();
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => panic!("{prov} round {round}: no connection request: {e}"),
                    }
                }
                let reply =
                    h.join().unwrap().unwrap_or_else(|e| panic!("{prov} round {round}: {e}"));
                assert_eq!(reply, b"ok");
            });
            assert_eq!(client.state(), EpState::Connected, "{prov} round {round}");
            eps.push((client, server));
        }
        // Every end at once, from two threads: each close races the
        // shutdown events of the others on the shared queue.
        let (clients, servers): (Vec<_>, Vec<_>) = eps.into_iter().unzip();
        std::thread::scope(|s| {
            s.spawn(move || drop(servers));
            drop(clients);
        });
    }
}

#[test]
fn sockets_endpoints_closed_with_events_queued() {
    churn("sockets");
}

#[test]
fn tcp_endpoints_closed_with_events_queued() {
    churn("tcp");
}

/// Rejections (with private data) that queue up together on the
/// connecting IA's `sockets` event queue, its reader held back meanwhile:
/// every connect must end `Rejected` with its data, none in its timeout.
#[test]
fn sockets_rejections_queued_together_are_all_read() {
    const CONNECTS: usize = 3;
    backend_ofi::register();
    let a = rmr_api::open("ofi:sockets:127.0.0.1").unwrap();
    let b = rmr_api::open("ofi:sockets:127.0.0.1").unwrap();
    let (pz, pevd) = (a.create_pz().unwrap(), b.create_evd().unwrap());
    let psp = b.create_psp(0, &pevd).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    let eps: Vec<_> = (0..CONNECTS)
        .map(|_| {
            let evd = a.create_evd().unwrap();
            (a.create_ep(&pz, &EpEvds::single(&evd)).unwrap(), evd)
        })
        .collect();
    let ofi_a = a.as_any().downcast_ref::<backend_ofi::OfiIa>().expect("an ofi IA");
    std::thread::scope(|s| {
        let connects: Vec<_> = eps
            .iter()
            .map(|(ep, _)| {
                let addr = addr.clone();
                s.spawn(move || ep.connect(&addr, svc, b"", WAIT))
            })
            .collect();
        // Answer every request with a rejection while a's reader is held:
        // the rejections wait together in a's queue.
        let hold = s.spawn(|| {
            assert!(backend_ofi::hostile::hold_event_queue(ofi_a, Duration::from_millis(1500)))
        });
        for i in 0..CONNECTS {
            match pevd.wait(Some(WAIT), 1) {
                Ok(Event::ConnectionRequest(cr)) => cr.reject(b"no").unwrap(),
                other => panic!("request {i}: {other:?}"),
            }
        }
        hold.join().unwrap();
        for (i, h) in connects.into_iter().enumerate() {
            match h.join().unwrap() {
                Err(Error::Rejected { private_data }) => assert_eq!(private_data, b"no"),
                other => panic!("connect {i}: expected Rejected, got {other:?}"),
            }
        }
    });
}
