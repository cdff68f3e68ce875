//! Messages across the loss of the control rail arrive exactly once, and
//! the two ends agree on the new control rail even when only one of them
//! saw the loss (see the crate's `handover` module).
//!
//! Rail 0 (the control rail) of the client runs through a proxy:
//! - `acks_lost`: the proxy holds back everything the server sends on
//!   rail 0, so the client's sends arrive but their acknowledgements do
//!   not; then it cuts the rail. Without the count exchange the client
//!   would send those messages again, and each would take a second receive.
//! - `follows_the_peer`: the proxy ends only the server's side of rail 0;
//!   the client's connection stays open and silent, so the client never
//!   sees the loss itself. It must learn the new control rail from the
//!   server's count and move its receives there, or the server's next send
//!   meets no receive.

use rmr_api::provider::conformance::{checksum, pattern};
use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, EpState, Evd, Event, MemRegion, Sge};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "support/proxy.rs"]
mod proxy;
use proxy::Proxy;

const WAIT: Duration = Duration::from_secs(20);
const MSG: u64 = 64;

struct Pair {
    a: Arc<dyn Ep>,
    b: Arc<dyn Ep>,
    evd_a: Arc<dyn Evd>,
    evd_b: Arc<dyn Evd>,
    /// Per end: the source of its messages and its inbox.
    src_a: (Arc<MemRegion>, Arc<dyn rmr_api::Lmr>),
    src_b: (Arc<MemRegion>, Arc<dyn rmr_api::Lmr>),
    inbox_a: (Arc<MemRegion>, Arc<dyn rmr_api::Lmr>),
    inbox_b: (Arc<MemRegion>, Arc<dyn rmr_api::Lmr>),
    proxy: Proxy,
    /// The IAs, the PSP and its EVD, kept for the pair's life.
    _keep: Vec<Box<dyn std::any::Any>>,
}

/// A client (a) and a server (b), two rails each, the client's rail 0
/// through a proxy; `n` messages' room on each side.
fn pair(engine: &str, net: u8, service: u16, n: u64) -> Pair {
    backend_tcp::register();
    multirail::register();
    let ip = |h: u8| format!("127.0.{net}.{h}");
    let open = |a: u8, b: u8| {
        rmr_api::open(&format!("multirail:tcp:{},tcp:{};engine={engine}", ip(a), ip(b))).unwrap()
    };
    let (ia_b, ia_a) = (open(1, 2), open(4, 5));
    let proxy = Proxy::start(&format!("{}:{service}", ip(3)), &format!("{}:{service}", ip(1)));
    let (pz_b, evd_b, pevd) =
        (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let psp = ia_b.create_psp(service, &pevd).unwrap();
    let b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let (eb, pe) = (b.clone(), pevd.clone());
    let server = std::thread::spawn(move || match pe.wait(Some(WAIT), 1).unwrap() {
        Event::ConnectionRequest(cr) => cr.accept(&eb, b"").unwrap(),
        e => panic!("{e:?}"),
    });
    a.connect(&format!("{},{}", ip(3), ip(2)), service, b"", WAIT).unwrap();
    server.join().unwrap();
    let region = |pz: &Arc<dyn rmr_api::Pz>, seed: u64| {
        let m = MemRegion::new((MSG * n) as usize);
        for i in 0..n {
            m.write(MSG * i, &pattern(seed + i, MSG as usize)).unwrap();
        }
        let l = pz.register_all(&m, Access::LOCAL_WRITE).unwrap();
        (m, l)
    };
    Pair {
        src_a: region(&pz_a, 1000),
        src_b: region(&pz_b, 2000),
        inbox_a: region(&pz_a, 0),
        inbox_b: region(&pz_b, 0),
        a,
        b,
        evd_a,
        evd_b,
        proxy,
        _keep: vec![Box::new(ia_a), Box::new(ia_b), Box::new(pevd), Box::new(psp)],
    }
}

fn post_recvs(ep: &Arc<dyn Ep>, inbox: &(Arc<MemRegion>, Arc<dyn rmr_api::Lmr>), n: u64) {
    for i in 0..n {
        ep.post_recv(&[Sge::new(&*inbox.1, MSG * i, MSG)], Cookie(i), DtoFlags::empty()).unwrap();
    }
}

fn post_send(ep: &Arc<dyn Ep>, src: &(Arc<MemRegion>, Arc<dyn rmr_api::Lmr>), i: u64) {
    ep.post_send(&[Sge::new(&*src.1, MSG * i, MSG)], Cookie(i), DtoFlags::empty()).unwrap();
}

/// Waits for the completions of `cookies` (in this order, each once),
/// printing the other events; every one must succeed.
fn expect_dtos(evd: &Arc<dyn Evd>, cookies: std::ops::Range<u64>, who: &str) -> Vec<Event> {
    let until = Instant::now() + WAIT;
    let mut others = Vec::new();
    for want in cookies {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match evd.wait(Some(left), 1) {
                Ok(Event::Dto(c)) => {
                    assert_eq!(c.cookie.0, want, "{who}: completions out of order: {c:?}");
                    assert!(c.status.is_ok(), "{who}: {c:?}");
                    break;
                }
                Ok(e) => {
                    println!("{who}: {e:?}");
                    others.push(e);
                }
                Err(e) => panic!("{who}: waiting for completion {want}: {e}"),
            }
        }
    }
    others
}

/// The EP's `handover` note.
fn handover_note(ep: &Arc<dyn Ep>) -> String {
    ep.attr().notes.into_iter().find(|(k, _)| k == "handover").map(|(_, v)| v).unwrap_or_default()
}

fn acks_lost(engine: &str, net: u8, service: u16) {
    const N: u64 = 12;
    let p = pair(engine, net, service, N + 4);
    post_recvs(&p.b, &p.inbox_b, N + 4);
    // The server harvests all along, as an application does, and counts
    // what its receives took; after the twelfth it looks for a thirteenth.
    let got = Arc::new(AtomicUsize::new(0));
    let (eb, evd_b, g2, eng) = (p.b.clone(), p.evd_b.clone(), got.clone(), engine.to_string());
    let server = std::thread::spawn(move || {
        let mut cookies = Vec::new();
        let until = Instant::now() + WAIT;
        let mut extra_until = None::<Instant>;
        loop {
            let now = Instant::now();
            let stop = extra_until.unwrap_or(until);
            if now >= stop {
                assert!(extra_until.is_some(), "{eng}: server got only {cookies:?}");
                break;
            }
            match evd_b.wait(Some(stop - now), 1) {
                Ok(Event::Dto(c)) => {
                    assert!(c.status.is_ok(), "{eng}: receive {c:?} (EP {:?})", eb.state());
                    cookies.push(c.cookie.0);
                    g2.store(cookies.len(), Ordering::Release);
                    if cookies.len() as u64 == N {
                        extra_until = Some(Instant::now() + Duration::from_millis(500));
                    }
                }
                Ok(e) => println!("server: {e:?}"),
                Err(_) => {}
            }
        }
        cookies
    });
    for i in 0..4 {
        post_send(&p.a, &p.src_a, i);
    }
    expect_dtos(&p.evd_a, 0..4, engine);
    // A write with immediate data the server refuses (a key it never gave
    // out) takes no receive there: it must not count as a message.
    let forged = rmr_api::RmrContext::with_keys(&[0xdead_0001, 0xdead_0002], 4096, 64).unwrap();
    p.a.post_rdma_write_imm(
        &[Sge::new(&*p.src_a.1, 0, 8)],
        forged.at(0),
        7,
        Cookie(100),
        DtoFlags::empty(),
    )
    .unwrap();
    match p.evd_a.wait(Some(WAIT), 1).unwrap() {
        Event::Dto(c) => assert!(c.cookie.0 == 100 && !c.status.is_ok(), "{engine}: {c:?}"),
        e => panic!("{engine}: {e:?}"),
    }
    // Messages 4..8 arrive; their acknowledgements do not.
    p.proxy.stall_back();
    for i in 4..8 {
        post_send(&p.a, &p.src_a, i);
    }
    let t = Instant::now();
    while got.load(Ordering::Acquire) < 8 {
        assert!(t.elapsed() < WAIT, "{engine}: the server got {got:?} of 8");
        std::thread::sleep(Duration::from_millis(5));
    }
    p.proxy.cut();
    // Their completions come (the server's count showed them delivered),
    // then the next messages go on rail 1.
    let events = expect_dtos(&p.evd_a, 4..8, engine);
    for i in 8..N {
        post_send(&p.a, &p.src_a, i);
    }
    let mut events2 = expect_dtos(&p.evd_a, 8..N, engine);
    events2.extend(events);
    let cookies = server.join().unwrap();
    assert_eq!(cookies, (0..N).collect::<Vec<_>>(), "{engine}: each message once, in order");
    for i in 0..N {
        assert_eq!(
            checksum(&p.inbox_b.0.to_vec(MSG * i, MSG as usize).unwrap()),
            checksum(&pattern(1000 + i, MSG as usize)),
            "{engine}: message {i} in receive {i}"
        );
    }
    assert_eq!(p.a.state(), EpState::Connected, "{engine}");
    let note = handover_note(&p.a);
    println!("{engine}: client handover: {note}");
    assert!(note.ends_with("not sent again 4"), "{engine}: {note}");
    assert!(
        events2.iter().any(|e| matches!(e, Event::RailDown { rail: 0, .. })),
        "{engine}: the client saw rail 0 go"
    );
}

fn follows_the_peer(engine: &str, net: u8, service: u16) {
    let p = pair(engine, net, service, 8);
    post_recvs(&p.a, &p.inbox_a, 4);
    post_recvs(&p.b, &p.inbox_b, 4);
    post_send(&p.b, &p.src_b, 0);
    expect_dtos(&p.evd_a, 0..1, "client");
    expect_dtos(&p.evd_b, 0..1, "server");
    // The server loses rail 0; the client's connection to the proxy stays
    // open and silent.
    p.proxy.cut_upstream();
    // The server's next message goes on its new control rail once the
    // client has followed and answered with its count.
    post_send(&p.b, &p.src_b, 1);
    let (evd_a, evd_b) = (p.evd_a.clone(), p.evd_b.clone());
    let client = std::thread::spawn(move || expect_dtos(&evd_a, 1..2, "client"));
    let server = expect_dtos(&evd_b, 1..2, "server");
    let client = client.join().unwrap();
    assert_eq!(
        checksum(&p.inbox_a.0.to_vec(MSG, MSG as usize).unwrap()),
        checksum(&pattern(2001, MSG as usize)),
        "{engine}: message 1 in the client's receive 1"
    );
    let why = client.iter().find_map(|e| match e {
        Event::RailDown { rail: 0, reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert!(
        why.as_deref().is_some_and(|w| w.contains("gave up")),
        "{engine}: the client ends rail 0 because the server gave it up: {why:?}"
    );
    assert!(
        server.iter().any(|e| matches!(e, Event::RailDown { rail: 0, .. })),
        "{engine}: the server lost rail 0"
    );
    // And the other way.
    post_send(&p.a, &p.src_a, 1);
    let (evd_b, _) = (p.evd_b.clone(), ());
    let server = std::thread::spawn(move || expect_dtos(&evd_b, 0..1, "server"));
    expect_dtos(&p.evd_a, 1..2, "client");
    server.join().unwrap();
    assert_eq!(
        checksum(&p.inbox_b.0.to_vec(0, MSG as usize).unwrap()),
        checksum(&pattern(1001, MSG as usize)),
        "{engine}: the client's message in the server's receive 0"
    );
    assert_eq!((p.a.state(), p.b.state()), (EpState::Connected, EpState::Connected));
}

#[test]
fn messages_whose_acknowledgements_were_lost_are_not_sent_again_inline() {
    acks_lost("inline", 81, 7681);
}

#[test]
fn messages_whose_acknowledgements_were_lost_are_not_sent_again_pinned() {
    acks_lost("pinned", 82, 7682);
}

#[test]
fn an_end_that_did_not_see_the_loss_follows_the_peer_inline() {
    follows_the_peer("inline", 83, 7683);
}

#[test]
fn an_end_that_did_not_see_the_loss_follows_the_peer_pinned() {
    follows_the_peer("pinned", 84, 7684);
}
