//! The bridge on loopback addresses, in one process: a quick check of
//! every operation through a real bridge over real sockets (the lab tests
//! do the same across network namespaces).

use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, EpEvds, Event, Ia, MemRegion, RmrContext, Sge};
use std::sync::Arc;
use std::time::Duration;
use zipper_bridge::{Bridge, BridgeConfig, BridgeIa, ClientConfig};

fn checksum(b: &[u8]) -> u64 {
    b.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A bridge between `127.0.<net>.1` (side A) and `.2` (side B) on `port`,
/// shaped by `cfg` (its addresses and port are filled in), and the two
/// bridged IAs of its users: B at `.3`, A at `.4` reaching B through it.
fn splice(net: u8, port: u16, cfg: BridgeConfig) -> (Bridge, Arc<dyn Ia>, Arc<dyn Ia>) {
    zipper_bridge::register();
    let ip = |h: u8| format!("127.0.{net}.{h}");
    // The users live at .3 and .4 (unless the test names its own members).
    let allow = if cfg.allow.is_empty() {
        vec![format!("127.0.{net}.0/24").parse().unwrap()]
    } else {
        cfg.allow.clone()
    };
    let bridge = Bridge::start(BridgeConfig {
        a: format!("tcp:{}", ip(1)),
        b: format!("tcp:{}", ip(2)),
        port,
        allow,
        ..cfg
    })
    .expect("bridge");
    let c = ClientConfig::default();
    let ia_b: Arc<dyn Ia> =
        BridgeIa::new(rmr_api::open(&format!("tcp:{}", ip(3))).unwrap(), None, c.clone());
    let ia_a: Arc<dyn Ia> =
        BridgeIa::new(rmr_api::open(&format!("tcp:{}", ip(4))).unwrap(), Some((ip(1), port)), c);
    (bridge, ia_a, ia_b)
}

fn dto(evd: &Arc<dyn rmr_api::Evd>) -> rmr_api::DtoCompletion {
    loop {
        match evd.wait(Some(Duration::from_secs(20)), 1).unwrap_or_else(|e| {
            panic!("{e}: {:?}", DEBUG.lock().unwrap().iter().map(|f| f()).collect::<Vec<_>>())
        }) {
            Event::Dto(c) => return c,
            e => println!("event {e:?}"),
        }
    }
}

type Dbg = Box<dyn Fn() -> String + Send>;
static DEBUG: std::sync::Mutex<Vec<Dbg>> = std::sync::Mutex::new(Vec::new());

#[test]
fn every_operation_through_a_cut_through_bridge() {
    every_operation(false, 11);
}

#[test]
fn every_operation_through_a_store_and_forward_bridge() {
    every_operation(true, 21);
}

fn every_operation(sf: bool, net: u8) {
    let cfg = BridgeConfig { chunk: 16 << 10, store_and_forward: sf, ..BridgeConfig::default() };
    let (bridge, ia_a, ia_b) = splice(net, 7710, cfg);
    assert!(bridge.status().contains("a->b thread: core"), "{}", bridge.status());
    const N: usize = 1 << 20;
    // Side B: listen, accept, expose a region.
    let (pz_b, evd_b) = (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap());
    let psp_evd = ia_b.create_evd().unwrap();
    let _psp = ia_b.create_psp(7720, &psp_evd).unwrap();
    let target = MemRegion::new(4 * N);
    let tl = pz_b.register_all(&target, Access::ALL).unwrap();
    let rbuf = MemRegion::new(N);
    let rl = pz_b.register_all(&rbuf, Access::LOCAL_WRITE).unwrap();
    let ep_b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let tctx = tl.rmr_context();
    let (ia_b2, ep_b2) = (ia_b.clone(), ep_b.clone());
    let server = std::thread::spawn(move || {
        let _ = ia_b2;
        match psp_evd.wait(Some(Duration::from_secs(20)), 1).unwrap() {
            Event::ConnectionRequest(cr) => {
                assert_eq!(cr.private_data(), b"hello B");
                cr.accept(&ep_b2, &tctx.to_bytes()).unwrap();
            }
            e => panic!("{e:?}"),
        }
    });
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep_a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let reply =
        ep_a.connect(&format!("127.0.{net}.3"), 7720, b"hello B", Duration::from_secs(20)).unwrap();
    server.join().unwrap();
    let ctx = RmrContext::from_bytes(&reply).unwrap();
    let (da, db) = (ep_a.clone(), ep_b.clone());
    DEBUG
        .lock()
        .unwrap()
        .push(Box::new(move || format!("A {:?} B {:?}", da.attr().notes, db.attr().notes)));
    let bridge = Arc::new(bridge);
    let b2 = bridge.clone();
    DEBUG.lock().unwrap().push(Box::new(move || format!("{:?}", b2.details())));

    // A send of 1 MiB (many chunks) and a small one, in order.
    ep_b.post_recv(&[Sge::new(&*rl, 0, N as u64)], Cookie(1), DtoFlags::empty()).unwrap();
    let small = MemRegion::new(64);
    let sl = pz_b.register_all(&small, Access::LOCAL_WRITE).unwrap();
    ep_b.post_recv(&[Sge::whole(&*sl)], Cookie(2), DtoFlags::empty()).unwrap();
    let data = pattern(1, N);
    let src = MemRegion::from_bytes(&data);
    let srcl = pz_a.register_all(&src, Access::ALL).unwrap();
    ep_a.post_send(&[Sge::whole(&*srcl)], Cookie(10), DtoFlags::empty()).unwrap();
    ep_a.post_send(&[Sge::new(&*srcl, 0, 8)], Cookie(11), DtoFlags::empty()).unwrap();
    let c = dto(&evd_b);
    assert_eq!((c.cookie.0, c.bytes), (1, N as u64));
    assert_eq!(checksum(&rbuf.to_vec(0, N).unwrap()), checksum(&data));
    let c = dto(&evd_b);
    assert_eq!((c.cookie.0, c.bytes), (2, 8));
    assert_eq!(small.to_vec(0, 8).unwrap(), data[..8]);
    assert_eq!(dto(&evd_a).cookie, 10);
    assert_eq!(dto(&evd_a).cookie, 11);

    // RDMA write of 3 MiB at an offset, suppressed, then a signalled one.
    let big = pattern(2, 3 * N);
    let bsrc = MemRegion::from_bytes(&big);
    let bl = pz_a.register_all(&bsrc, Access::ALL).unwrap();
    ep_a.post_rdma_write(&[Sge::whole(&*bl)], ctx.at(100), Cookie(20), DtoFlags::SUPPRESS).unwrap();
    ep_a.post_rdma_write(&[Sge::new(&*bl, 0, 8)], ctx.at(0), Cookie(21), DtoFlags::empty())
        .unwrap();
    let c = dto(&evd_a);
    assert_eq!(c.cookie.0, 21, "suppressed write reports nothing");
    c.result().unwrap();
    assert_eq!(checksum(&target.to_vec(100, 3 * N).unwrap()), checksum(&big));

    // RDMA read of 2 MiB back.
    let back = MemRegion::new(2 * N);
    let backl = pz_a.register_all(&back, Access::LOCAL_WRITE).unwrap();
    ep_a.post_rdma_read(&[Sge::whole(&*backl)], ctx.at(100), Cookie(30), DtoFlags::empty())
        .unwrap();
    let c = dto(&evd_a);
    assert_eq!((c.cookie.0, c.op), (30, rmr_api::DtoOp::RdmaRead));
    c.result().unwrap();
    assert_eq!(checksum(&back.to_vec(0, 2 * N).unwrap()), checksum(&big[..2 * N]));

    // A bad key fails at the initiator, nothing lands.
    let bad = RmrContext::new(ctx.key() ^ 1, ctx.addr, ctx.len);
    ep_a.post_rdma_write(&[Sge::new(&*bl, 0, 64)], bad.at(0), Cookie(40), DtoFlags::SUPPRESS)
        .unwrap();
    let c = dto(&evd_a);
    assert_eq!(c.cookie.0, 40);
    assert!(c.result().is_err(), "{c:?}");

    // B sends back to A.
    let abuf = MemRegion::new(64);
    let al = pz_a.register_all(&abuf, Access::LOCAL_WRITE).unwrap();
    ep_a.post_recv(&[Sge::whole(&*al)], Cookie(50), DtoFlags::empty()).unwrap();
    let bsrc2 = MemRegion::from_bytes(b"from B!!");
    let bl2 = pz_b.register_all(&bsrc2, Access::empty()).unwrap();
    ep_b.post_send(&[Sge::whole(&*bl2)], Cookie(51), DtoFlags::SUPPRESS).unwrap();
    let c = dto(&evd_a);
    assert_eq!((c.cookie.0, c.bytes), (50, 8));
    assert_eq!(abuf.to_vec(0, 8).unwrap(), b"from B!!");
    println!("{}", bridge.status());
    ep_a.disconnect().unwrap();
    assert_eq!(bridge.stop(), 0);
}

/// A bridge told to stop while writes are in flight: every write the
/// initiator posted ends with an event — completed, or failed — none is
/// silently dropped.
#[test]
fn stop_mid_transfer_leaves_nothing_unreported() {
    let cfg = BridgeConfig { drain: Duration::from_millis(30), ..BridgeConfig::default() };
    let (bridge, ia_a, ia_b) = splice(31, 7711, cfg);
    let (pz_b, evd_b, psp_evd) =
        (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let _psp = ia_b.create_psp(7721, &psp_evd).unwrap();
    let target = MemRegion::new(1 << 20);
    let tl = pz_b.register_all(&target, Access::ALL).unwrap();
    let ep_b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let (ep_b2, tctx) = (ep_b.clone(), tl.rmr_context());
    let server = std::thread::spawn(move || match psp_evd.wait(Some(Duration::from_secs(20)), 1) {
        Ok(Event::ConnectionRequest(cr)) => cr.accept(&ep_b2, &tctx.to_bytes()).unwrap(),
        e => panic!("{e:?}"),
    });
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep_a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let ctx = RmrContext::from_bytes(
        &ep_a.connect("127.0.31.3", 7721, b"", Duration::from_secs(20)).unwrap(),
    )
    .unwrap();
    server.join().unwrap();
    let src = MemRegion::from_bytes(&pattern(3, 1 << 20));
    let sl = pz_a.register_all(&src, Access::empty()).unwrap();
    const N: u64 = 300;
    for i in 0..N {
        ep_a.post_rdma_write(&[Sge::whole(&*sl)], ctx.at(0), Cookie(i), DtoFlags::empty()).unwrap();
    }
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        bridge.stop()
    });
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut seen = std::collections::BTreeSet::new();
    while ok + failed < N {
        match evd_a.wait(Some(Duration::from_secs(30)), 1).expect("every write reports") {
            Event::Dto(c) => {
                assert!(seen.insert(c.cookie.0), "cookie {} twice", c.cookie);
                if c.status.is_ok() { ok += 1 } else { failed += 1 }
            }
            Event::Disconnected { .. } | Event::Broken { .. } => {}
            e => println!("{e:?}"),
        }
    }
    stopper.join().unwrap();
    println!("stop mid-transfer: {ok} completed, {failed} failed with an error event");
    assert_eq!(ok + failed, N);
    assert!(failed > 0, "the bridge stopped before everything went through");
}

/// The target may send the moment it has accepted, before the bridge has
/// accepted the client's side of the splice: the message waits at the
/// bridge and arrives once the client is connected — it is neither lost
/// nor failed. (The bridge is told to pause between the two accepts, so
/// the race the lab's barrier test hit now and then happens every time.)
#[test]
fn a_send_at_accept_time_waits_for_the_client_side() {
    let cfg = BridgeConfig { accept_delay: Duration::from_millis(200), ..BridgeConfig::default() };
    let (bridge, ia_a, ia_b) = splice(41, 7712, cfg);
    let (pz_b, evd_b, psp_evd) =
        (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let _psp = ia_b.create_psp(7722, &psp_evd).unwrap();
    let ep_b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let msgs = MemRegion::from_bytes(b"early 1!early 2!");
    let ml = pz_b.register_all(&msgs, Access::empty()).unwrap();
    let (ep_b2, evd_b2) = (ep_b.clone(), evd_b.clone());
    // B accepts and sends at once: a suppressed send and a signalled one.
    let server = std::thread::spawn(move || {
        match psp_evd.wait(Some(Duration::from_secs(20)), 1) {
            Ok(Event::ConnectionRequest(cr)) => cr.accept(&ep_b2, b"").unwrap(),
            e => panic!("{e:?}"),
        }
        ep_b2.post_send(&[Sge::new(&*ml, 0, 8)], Cookie(1), DtoFlags::SUPPRESS).unwrap();
        ep_b2.post_send(&[Sge::new(&*ml, 8, 8)], Cookie(2), DtoFlags::empty()).unwrap();
        dto(&evd_b2)
    });
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep_a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    ep_a.connect("127.0.41.3", 7722, b"", Duration::from_secs(20)).unwrap();
    let rbuf = MemRegion::new(16);
    let rl = pz_a.register_all(&rbuf, Access::LOCAL_WRITE).unwrap();
    ep_a.post_recv(&[Sge::new(&*rl, 0, 8)], Cookie(11), DtoFlags::empty()).unwrap();
    ep_a.post_recv(&[Sge::new(&*rl, 8, 8)], Cookie(12), DtoFlags::empty()).unwrap();
    for k in [11, 12] {
        let c = dto(&evd_a);
        assert_eq!((c.cookie.0, c.bytes), (k, 8), "{c:?}");
        c.result().unwrap();
    }
    assert_eq!(rbuf.to_vec(0, 16).unwrap(), b"early 1!early 2!");
    let c = server.join().unwrap();
    assert_eq!(c.cookie.0, 2, "only the signalled send reports: {c:?}");
    c.result().expect("the early send was delivered");
    ep_a.disconnect().unwrap();
    assert_eq!(bridge.stop(), 0);
}

/// Only the job gets in: a bridge that admits 127.0.31.3 and .4 (its two
/// users) refuses a client naming any other target — one that listens and
/// one that does not — with the same typed rejection, before it connects
/// anywhere (the listening stranger sees no connection); a member target
/// is reached. A bridge admitting nobody does not start.
#[test]
fn only_the_job_gets_through_the_bridge() {
    let none = Bridge::start(BridgeConfig {
        a: "tcp:127.0.31.1".into(),
        b: "tcp:127.0.31.2".into(),
        port: 7790,
        ..BridgeConfig::default()
    });
    assert!(
        matches!(none, Err(rmr_api::Error::InvalidArgument(ref w)) if w.contains("--allow")),
        "{:?}",
        none.err()
    );
    let allow = vec!["127.0.31.3".parse().unwrap(), "127.0.31.4".parse().unwrap()];
    let (_bridge, ia_a, ia_b) = splice(31, 7790, BridgeConfig { allow, ..BridgeConfig::default() });
    // A stranger that listens beside the bridge's side B.
    let stranger = std::net::TcpListener::bind("127.0.31.9:7791").unwrap();
    stranger.set_nonblocking(true).unwrap();
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let mut answers = Vec::new();
    for target in ["127.0.31.9", "127.0.31.10"] {
        let ep = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
        match ep.connect(target, 7791, b"let me through", Duration::from_secs(10)) {
            Err(rmr_api::Error::Rejected { private_data }) => answers.push(private_data),
            r => panic!("{target}: {r:?}"),
        }
    }
    assert_eq!(answers[0], zipper_bridge::NOT_ADMITTED);
    assert_eq!(answers[0], answers[1], "the answer must not tell which target listens");
    assert!(
        matches!(stranger.accept(), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the bridge connected to a target outside its job"
    );
    // A member target (side B's user at .3) is reached.
    let (pz_b, evd_b) = (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap());
    let pevd = ia_b.create_evd().unwrap();
    let _psp = ia_b.create_psp(7792, &pevd).unwrap();
    let ep_b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let server = std::thread::spawn(move || match pevd.wait(Some(Duration::from_secs(20)), 1) {
        Ok(Event::ConnectionRequest(cr)) => cr.accept(&ep_b, b"member").unwrap(),
        e => panic!("{e:?}"),
    });
    let ep = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let reply = ep.connect("127.0.31.3", 7792, b"hi", Duration::from_secs(20)).unwrap();
    server.join().unwrap();
    assert_eq!(reply, b"member");
}

/// An event loop on a bridged EVD's descriptor (`wait_fd` + `arm`) loses
/// no event: rmr-api's conformance case, through a live bridge.
#[test]
fn an_event_loop_on_a_bridged_evd_loses_nothing() {
    let port = 7791;
    let (_bridge, _a, _b) = splice(9, port, BridgeConfig::default());
    let t = rmr_api::provider::conformance::Target::new(
        "zipper",
        zipper_bridge::register,
        &format!("zipper:tcp:127.0.9.4@127.0.9.1:{port}"),
        "zipper:tcp:127.0.9.3",
    );
    rmr_api::provider::conformance::cases::event_loop_arm_and_poll_loses_nothing(&t);
}
