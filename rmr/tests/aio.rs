//! The tokio face (feature `tokio`): 1,000 concurrent RDMA writes on one
//! runtime thread, each awaited by its own task; futures dropped mid-wait
//! under load lose no event; async connect and accept.
#![cfg(feature = "tokio")]

use rmr::aio::{AsyncEvd, accept, connect};
use rmr::{Access, Cookie, DtoFlags, Ep, EpEvds, Event, MemRegion, Sge};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(20);

/// A connected pair on one IA, connected through the async calls.
async fn pair() -> (Arc<dyn rmr::Ia>, Arc<dyn rmr::Pz>, Arc<dyn Ep>, Arc<dyn Ep>, AsyncEvd, AsyncEvd)
{
    let ia = rmr::open("tcp:127.0.0.1").unwrap();
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
    let (conn_a, reqs) = (AsyncEvd::new(cevd_a).unwrap(), AsyncEvd::new(pevd).unwrap());
    let (addr, svc) = (psp.address(), psp.service());
    let b2 = b.clone();
    let server = async move {
        let cr = accept(&reqs).await.unwrap();
        assert_eq!(cr.private_data(), b"async");
        cr.accept(&b2, b"welcome").unwrap();
    };
    let client = connect(&*a, &conn_a, &addr, svc, b"async", WAIT);
    let (reply, ()) = tokio::join!(client, server);
    assert_eq!(reply.unwrap(), b"welcome");
    (ia, pz, a, b, AsyncEvd::new(evd_a).unwrap(), AsyncEvd::new(evd_b).unwrap())
}

#[tokio::test(flavor = "current_thread")]
async fn a_thousand_concurrent_writes_on_one_runtime_thread() {
    const N: u64 = 1000;
    let (_ia, pz, a, b, events, _events_b) = pair().await;
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
                let mut n = 0;
                while n < N {
                    if let Event::Dto(c) = events.next_within(WAIT).await.expect("completions") {
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
                    a.post_rdma_write(&sge, ctx.at(8 * i), Cookie(i), DtoFlags::empty()).unwrap();
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

#[tokio::test(flavor = "current_thread")]
async fn futures_dropped_mid_wait_lose_no_event() {
    const N: u64 = 400;
    let (_ia, pz, a, b, _events_a, events_b) = pair().await;
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
            match poll_once(events_b.next()).await {
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
    println!("{N} receives, {dropped} futures dropped mid-wait");
}

/// Polls `f` once: its output if it was ready, `None` (and `f` dropped,
/// mid-wait) if not.
async fn poll_once<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}
