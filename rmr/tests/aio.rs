//! The tokio face (feature `tokio`), over tcp, 2-rail multirail and
//! libfabric (feature `ofi`): 1,000 concurrent RDMA writes on one runtime
//! thread, each awaited by its own task; futures and stream items dropped
//! mid-wait under load lose no event; async connect and accept.
#![cfg(feature = "tokio")]

use rmr::aio::{AsyncEvd, Stream, accept, connect};
use rmr::{Access, Cookie, DtoFlags, Ep, EpEvds, Event, MemRegion, Sge};
use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(20);

/// What [`pair`] returns: the IA, its PZ, the two endpoints and their
/// EVDs as `AsyncEvd`s.
type Pair = (Arc<dyn rmr::Ia>, Arc<dyn rmr::Pz>, Arc<dyn Ep>, Arc<dyn Ep>, AsyncEvd, AsyncEvd);

/// A connected pair on one IA of `spec`. The tcp backend connects in the
/// background, so both sides run on this task (`aio::connect` beside
/// `aio::accept`); a backend whose `connect_start` connects before
/// returning gets its requests accepted on a thread.
async fn pair(spec: &str) -> Pair {
    let ia = rmr::open(spec).unwrap();
    let pz = ia.create_pz().unwrap();
    let (evd_a, evd_b, cevd_a, pevd) = (
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
    );
    let psp = ia.create_psp(0, &pevd).unwrap();
    let a = ia
        .create_ep(
            &pz,
            &EpEvds { request: evd_a.clone(), recv: evd_a.clone(), conn: cevd_a.clone() },
        )
        .unwrap();
    let b = ia.create_ep(&pz, &EpEvds::single(&evd_b)).unwrap();
    let conn_a = AsyncEvd::new(cevd_a).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    let check = |cr: rmr::ConnRequest, b: &Arc<dyn Ep>| {
        assert_eq!(cr.private_data(), b"async");
        cr.accept(b, b"welcome").unwrap();
    };
    let client = connect(&*a, &conn_a, &addr, svc, b"async", WAIT);
    let reply = if spec.starts_with("tcp:") {
        let reqs = AsyncEvd::new(pevd).unwrap();
        let server = async { check(accept(&reqs).await.unwrap(), &b) };
        tokio::join!(client, server).0
    } else {
        let b2 = b.clone();
        let server = std::thread::spawn(move || {
            loop {
                if let Event::ConnectionRequest(cr) = pevd.wait(Some(WAIT), 1).unwrap() {
                    break check(cr, &b2);
                }
            }
        });
        let reply = client.await;
        server.join().unwrap();
        reply
    };
    assert_eq!(reply.unwrap(), b"welcome");
    drop(psp);
    (ia, pz, a, b, AsyncEvd::new(evd_a).unwrap(), AsyncEvd::new(evd_b).unwrap())
}

/// Two rails on loopback.
const MULTIRAIL: &str = "multirail:tcp:127.0.0.1,tcp:127.0.0.2";
/// libfabric's tcp provider on loopback.
#[cfg(feature = "ofi")]
const OFI: &str = "ofi:tcp:127.0.0.1";

#[tokio::test(flavor = "current_thread")]
async fn a_thousand_concurrent_writes_on_one_runtime_thread() {
    concurrent_writes("tcp:127.0.0.1").await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_thousand_concurrent_writes_over_multirail() {
    concurrent_writes(MULTIRAIL).await;
}

#[cfg(feature = "ofi")]
#[tokio::test(flavor = "current_thread")]
async fn a_thousand_concurrent_writes_over_libfabric() {
    concurrent_writes(OFI).await;
}

#[tokio::test(flavor = "current_thread")]
async fn futures_dropped_mid_wait_lose_no_event() {
    dropped_futures("tcp:127.0.0.1").await;
}

#[tokio::test(flavor = "current_thread")]
async fn futures_dropped_mid_wait_lose_no_event_over_multirail() {
    dropped_futures(MULTIRAIL).await;
}

#[cfg(feature = "ofi")]
#[tokio::test(flavor = "current_thread")]
async fn futures_dropped_mid_wait_lose_no_event_over_libfabric() {
    dropped_futures(OFI).await;
}

/// 1,000 RDMA writes over `spec`, each awaited by its own task on one
/// runtime thread, their completions routed by cookie from the stream of
/// the EVD's events.
async fn concurrent_writes(spec: &str) {
    const N: u64 = 1000;
    let (_ia, pz, a, b, events, _events_b) = pair(spec).await;
    let target = MemRegion::new(8 * N as usize);
    let tl = pz.register_all(&target, Access::ALL).unwrap();
    let ctx = tl.rmr_context();
    let src = MemRegion::new(8 * N as usize);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    // Completions are routed to the task that posted them, by cookie.
    let waiting: Rc<std::cell::RefCell<HashMap<u64, oneshot::Sender<rmr::Status>>>> = Rc::default();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let w = waiting.clone();
            let router = tokio::task::spawn_local(async move {
                let mut stream = events.events();
                let mut n = 0;
                while n < N {
                    let next = poll_fn(|cx| Pin::new(&mut stream).poll_next(cx));
                    let ev = tokio::time::timeout(WAIT, next).await.expect("completions");
                    if let Event::Dto(c) = ev.expect("an item").expect("an event") {
                        let tx = w.borrow_mut().remove(&c.cookie.0).expect("a waiting task");
                        let _ = tx.send(c.status);
                        n += 1;
                    }
                }
            });
            let mut tasks = Vec::new();
            for i in 0..N {
                let (tx, rx) = oneshot::channel();
                waiting.borrow_mut().insert(i, tx);
                let (a, sl, src) = (a.clone(), sl.clone(), src.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    src.store_u64(8 * i, 0xa000 + i).unwrap();
                    let sge = [Sge::new(&*sl, 8 * i, 8)];
                    // A full send queue is backpressure, not an error: let
                    // the router take completions, then post again.
                    loop {
                        match a.post_rdma_write(&sge, ctx.at(8 * i), Cookie(i), DtoFlags::empty()) {
                            Ok(()) => break,
                            Err(rmr::Error::QueueFull) => tokio::task::yield_now().await,
                            Err(e) => panic!("write {i}: {e}"),
                        }
                    }
                    rx.await.expect("routed")
                }));
            }
            for t in tasks {
                assert!(t.await.unwrap().is_ok());
            }
            router.await.unwrap();
        })
        .await;
    for i in 0..N {
        assert_eq!(target.load_u64(8 * i).unwrap(), 0xa000 + i);
    }
    drop(b);
}

/// 200 receives over `spec` while every other wait (a future of `next`,
/// or the stream's next item) is polled once and dropped if nothing was
/// there: every receive arrives exactly once.
async fn dropped_futures(spec: &str) {
    const N: u64 = 200;
    let (_ia, pz, a, b, _events_a, events_b) = pair(spec).await;
    let inbox = MemRegion::new(8 * N as usize);
    let il = pz.register_all(&inbox, Access::LOCAL_WRITE).unwrap();
    for i in 0..N {
        b.post_recv(&[Sge::new(&*il, 8 * i, 8)], Cookie(i), DtoFlags::empty()).unwrap();
    }
    // A wait dropped before anything was sent: it armed the EVD and
    // registered with the reactor, and must have taken nothing.
    while let Some(ev) = poll_once(events_b.next()).await {
        assert!(matches!(ev, Ok(Event::Established { .. })), "{ev:?}");
    }
    let mut dropped = 1;
    let src = MemRegion::new(8 * N as usize);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let sender = std::thread::spawn(move || {
        for i in 0..N {
            src.store_u64(8 * i, i + 1).unwrap();
            loop {
                match a.post_send(&[Sge::new(&*sl, 8 * i, 8)], Cookie(i), DtoFlags::SUPPRESS) {
                    Ok(()) => break,
                    Err(rmr::Error::QueueFull) => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
            if i % 5 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        a
    });
    // Every other wait is polled once and dropped if nothing was there (as
    // a `select!` that took another branch would): no receive may be lost.
    let mut got = vec![false; N as usize];
    let (mut n, mut turn) = (0, 0u64);
    while n < N {
        turn += 1;
        let ev = if turn % 2 == 0 {
            let waited = if turn % 4 == 0 {
                poll_once(events_b.next()).await
            } else {
                let mut stream = events_b.events();
                poll_once(poll_fn(|cx| Pin::new(&mut stream).poll_next(cx))).await.flatten()
            };
            match waited {
                Some(ev) => ev.unwrap(),
                None => {
                    dropped += 1;
                    continue;
                }
            }
        } else {
            events_b.next_within(WAIT).await.expect("receives")
        };
        if let Event::Dto(c) = ev {
            assert!(c.status.is_ok());
            assert!(!std::mem::replace(&mut got[c.cookie.0 as usize], true), "twice");
            n += 1;
        }
    }
    let _a = sender.join().unwrap();
    for i in 0..N {
        assert_eq!(inbox.load_u64(8 * i).unwrap(), i + 1);
    }
    println!("{spec}: {N} receives, {dropped} futures dropped mid-wait");
}

/// Polls `f` once: its output if it was ready, `None` (and `f` dropped,
/// mid-wait) if not.
async fn poll_once<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    poll_fn(|cx| {
        std::task::Poll::Ready(match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// Several tasks waiting on one `AsyncEvd` at once (two `next()` futures
/// and a stream, on one runtime thread), each for one event: all wake. A
/// wait that woke only the last task to register would leave the others
/// asleep for good once it had its event.
#[tokio::test(flavor = "current_thread")]
async fn tasks_sharing_one_evd_all_wake() {
    let ia = rmr::open("tcp:127.0.0.1").unwrap();
    let evd = ia.create_evd().unwrap();
    let shared = Rc::new(AsyncEvd::new(evd.clone()).unwrap());
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let mut tasks = Vec::new();
            for kind in 0..3 {
                let e = shared.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let ev = if kind == 2 {
                        let mut stream = e.events();
                        poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await.expect("an item")
                    } else {
                        e.next().await
                    };
                    match ev.unwrap() {
                        Event::Software(v) => v,
                        other => panic!("{other:?}"),
                    }
                }));
            }
            // All three asleep on the descriptor, then one event at a time.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let poster = std::thread::spawn(move || {
                for v in 0..3 {
                    evd.post_software(v).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let mut got = Vec::new();
            for t in tasks {
                got.push(
                    tokio::time::timeout(WAIT, t).await.expect("a task slept through").unwrap(),
                );
            }
            poster.join().unwrap();
            got.sort_unstable();
            assert_eq!(got, vec![0, 1, 2], "each event once");
        })
        .await;
}
