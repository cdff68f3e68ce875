//! A lost rail comes back: rail 1 of a two-rail endpoint runs through a
//! proxy the test cuts three times during a checked stream. Each time both
//! ends see `RailDown`, the connecting side connects the rail again through
//! the proxy (which keeps accepting, like a link that heals), both ends see
//! `RailUp`, and striped writes cross rail 1 again. Every round's data is
//! checked by the server, every DTO completes exactly once, and the
//! counters of `MrEp::stats` agree. A forged or replayed rejoin request is
//! refused.

use multirail::MrEp;
use rmr_api::provider::conformance::{checksum, pattern};
use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, EpState, Evd, Event, MemRegion, RmrContext};
use rmr_api::{Sge, Status};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/proxy.rs"]
mod proxy;
use proxy::Proxy;

const WAIT: Duration = Duration::from_secs(20);
const LEN: usize = 256 << 10;

/// Rail events seen by one side.
#[derive(Default, Debug)]
struct Seen {
    down: Vec<u8>,
    up: Vec<u8>,
}

impl Seen {
    /// Notes a rail event; false for anything else.
    fn note(&mut self, e: &Event) -> bool {
        match e {
            Event::RailDown { rail, reason, .. } => {
                println!("rail {rail} down: {reason}");
                self.down.push(*rail);
            }
            Event::RailUp { rail, .. } => {
                println!("rail {rail} up");
                self.up.push(*rail);
            }
            _ => return false,
        }
        true
    }
}

fn mr(ep: &Arc<dyn Ep>) -> &MrEp {
    ep.as_any().downcast_ref::<MrEp>().expect("a multirail EP")
}

/// The server: for each notify, checks the target's checksum against the
/// one in the notify and answers 1 or 0; stops at a notify of 0.
fn serve(
    ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    target: Arc<MemRegion>,
    cl: Arc<dyn rmr_api::Lmr>,
    ctl: Arc<MemRegion>,
) -> (u64, u64, Seen) {
    let (mut good, mut bad, mut seen) = (0, 0, Seen::default());
    for r in 0.. {
        ep.post_recv(&[Sge::new(&*cl, 0, 8)], Cookie(r), DtoFlags::empty()).unwrap();
        let c = loop {
            match evd.wait(Some(WAIT), 1).expect("server: an event") {
                Event::Dto(c) if c.cookie.0 == r => break c,
                Event::Dto(c) if c.status.is_ok() => {}
                Event::Established { .. } => {}
                e if seen.note(&e) => {}
                e => panic!("server: {e:?}"),
            }
        };
        assert_eq!(c.status, Status::Success, "server: receive {r}");
        let want = ctl.load_u64(0).unwrap();
        if want == 0 {
            break;
        }
        let ok = checksum(&target.to_vec(0, LEN).unwrap()) == want;
        if ok {
            good += 1
        } else {
            bad += 1
        }
        ctl.store_u64(8, u64::from(ok)).unwrap();
        ep.post_send(&[Sge::new(&*cl, 8, 8)], Cookie(1 << 40 | r), DtoFlags::SUPPRESS).unwrap();
    }
    // RailUp may come after the last round on this side: a short look.
    let t = Instant::now();
    while seen.up.len() < seen.down.len() && t.elapsed() < Duration::from_secs(5) {
        if let Ok(e) = evd.wait(Some(Duration::from_millis(50)), 1) {
            seen.note(&e);
        }
    }
    (good, bad, seen)
}

/// A connected pair over two loopback rails, the client's rail 1 through
/// a proxy: client rails .4 and .5, server rails .1 and .2, the proxy at .3.
struct Pair {
    pz_a: Arc<dyn rmr_api::Pz>,
    pz_b: Arc<dyn rmr_api::Pz>,
    evd_a: Arc<dyn Evd>,
    evd_b: Arc<dyn Evd>,
    ep_a: Arc<dyn Ep>,
    ep_b: Arc<dyn Ep>,
    proxy: Proxy,
    /// What the server's accept answered.
    pd: Vec<u8>,
    _psp: Arc<dyn rmr_api::Psp>,
}

/// Opens both IAs with `opts` and connects; the server accepts with what
/// `answer` makes of its PZ.
fn pair(
    opts: &str,
    net: u8,
    service: u16,
    answer: impl FnOnce(&Arc<dyn rmr_api::Pz>) -> Vec<u8>,
) -> Pair {
    pair_with(opts, net, service, "", None, answer)
}

/// [`pair`], the client's tcp rails opened with `rail_opts`, and the
/// proxy's receive buffer set to `rcvbuf`.
fn pair_with(
    opts: &str,
    net: u8,
    service: u16,
    rail_opts: &str,
    rcvbuf: Option<usize>,
    answer: impl FnOnce(&Arc<dyn rmr_api::Pz>) -> Vec<u8>,
) -> Pair {
    backend_tcp::register();
    multirail::register();
    let ip = |h: u8| format!("127.0.{net}.{h}");
    let open = |a: u8, b: u8| {
        rmr_api::open(&format!("multirail:tcp:{},tcp:{};{opts}", ip(a), ip(b))).unwrap()
    };
    let ia_b = open(1, 2);
    let ia_a: Arc<dyn rmr_api::Ia> = if rail_opts.is_empty() {
        open(4, 5)
    } else {
        let mut cfg = multirail::MrConfig::default();
        for kv in opts.split(';').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap();
            cfg.set(k, v).unwrap();
        }
        let rail = |h: u8| rmr_api::open(&format!("tcp:{};{rail_opts}", ip(h))).unwrap();
        multirail::MrIa::new(vec![rail(4), rail(5)], cfg).unwrap()
    };
    let proxy =
        Proxy::start_with(&format!("{}:{service}", ip(3)), &format!("{}:{service}", ip(2)), rcvbuf);
    let (pz_b, evd_b, pevd) =
        (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let _psp = ia_b.create_psp(service, &pevd).unwrap();
    let ep_b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep_a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let (eb, pe, mine) = (ep_b.clone(), pevd.clone(), answer(&pz_b));
    let acceptor = std::thread::spawn(move || match pe.wait(Some(WAIT), 1).unwrap() {
        Event::ConnectionRequest(cr) => cr.accept(&eb, &mine).unwrap(),
        e => panic!("{e:?}"),
    });
    let pd = ep_a.connect(&format!("{},{}", ip(1), ip(3)), service, b"", WAIT).unwrap();
    acceptor.join().unwrap();
    Pair { pz_a, pz_b, evd_a, evd_b, ep_a, ep_b, proxy, pd, _psp }
}

fn run(opts: &str, net: u8, service: u16) {
    let ip = |h: u8| format!("127.0.{net}.{h}");
    let target = MemRegion::new(LEN);
    let mut tl = None;
    let p = pair(&format!("threshold=16K;{opts}"), net, service, |pz| {
        let l = pz.register_all(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
        let ctx = l.rmr_context().to_bytes().to_vec();
        tl = Some(l);
        ctx
    });
    let Pair { pz_a, pz_b, evd_a, evd_b, ep_a, ep_b, proxy, pd, _psp } = p;
    let sctl = MemRegion::new(64);
    let scl = pz_b.register_all(&sctl, Access::LOCAL_WRITE).unwrap();
    let ctx = RmrContext::from_bytes(&pd).unwrap();
    forged_rejoins_are_refused(&ep_a, &ep_b, &ip(2), &ip(6), service);
    let (eb, ev) = (ep_b.clone(), evd_b.clone());
    let server = std::thread::spawn(move || serve(eb, ev, target, scl, sctl));

    let src = MemRegion::new(LEN);
    let sl = pz_a.register_all(&src, Access::empty()).unwrap();
    let ctl = MemRegion::new(64);
    let cl = pz_a.register_all(&ctl, Access::LOCAL_WRITE).unwrap();
    let mut seen = Seen::default();
    let mut done: HashSet<u64> = HashSet::new();
    let mut round = 0u64;
    // One round: a striped write of a fresh pattern, a notify with its
    // checksum, the server's verdict. Returns the rail events it saw.
    let mut one_round = |seen: &mut Seen| {
        round += 1;
        let p = pattern(round, LEN);
        src.write(0, &p).unwrap();
        ctl.store_u64(0, checksum(&p)).unwrap();
        ep_a.post_recv(&[Sge::new(&*cl, 8, 8)], Cookie(3 << 40 | round), DtoFlags::empty())
            .unwrap();
        ep_a.post_rdma_write(
            &[Sge::whole(&*sl)],
            ctx.at(0),
            Cookie(1 << 40 | round),
            DtoFlags::empty(),
        )
        .unwrap();
        ep_a.post_send(&[Sge::new(&*cl, 0, 8)], Cookie(2 << 40 | round), DtoFlags::empty())
            .unwrap();
        let mut left = 3;
        while left > 0 {
            match evd_a.wait(Some(WAIT), 1).expect("client: an event") {
                Event::Dto(c) => {
                    assert_eq!(c.status, Status::Success, "{opts}: round {round}: {c:?}");
                    assert!(done.insert(c.cookie.0), "{opts}: {:#x} completed twice", c.cookie.0);
                    left -= 1;
                }
                Event::Established { .. } => {}
                e if seen.note(&e) => {}
                e => panic!("{opts}: client: {e:?}"),
            }
        }
        assert_eq!(
            ctl.load_u64(8).unwrap(),
            1,
            "{opts}: round {round}: the server found the data damaged"
        );
        ctl.store_u64(8, 7).unwrap();
    };
    // Four rounds, and rail 1 carried stripes of them.
    let striped = |one_round: &mut dyn FnMut(&mut Seen), seen: &mut Seen, when: &str| {
        let before = proxy.bytes();
        for _ in 0..4 {
            one_round(seen);
        }
        let carried = proxy.bytes() - before;
        assert!(carried > LEN as u64 / 4, "{opts}: {when}: rail 1 carried {carried} bytes");
    };
    for cut in 1..=3 {
        striped(&mut one_round, &mut seen, &format!("before cut {cut}"));
        proxy.cut();
        // The stream goes on over rail 0 until rail 1 is back.
        let t = Instant::now();
        while seen.up.len() < cut {
            one_round(&mut seen);
            assert!(
                t.elapsed() < WAIT,
                "{opts}: cut {cut}: rail 1 not back: {seen:?}, {:?}",
                mr(&ep_a).stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(seen.down.len(), cut, "{opts}: {seen:?}");
        assert_eq!(ep_a.state(), EpState::Connected);
    }
    // The healed rail takes stripes again.
    striped(&mut one_round, &mut seen, "after the last rejoin");
    // The end: a notify of 0.
    ctl.store_u64(0, 0).unwrap();
    ep_a.post_send(&[Sge::new(&*cl, 0, 8)], Cookie(9 << 40), DtoFlags::SUPPRESS).unwrap();
    let (good, bad, sseen) = server.join().unwrap();
    assert_eq!((good, bad), (round, 0), "{opts}: rounds checked by the server");
    assert_eq!(done.len() as u64, 3 * round, "{opts}: every DTO completed once");
    assert_eq!(seen.down, vec![1, 1, 1], "{opts}: client");
    assert_eq!(seen.up, vec![1, 1, 1], "{opts}: client");
    assert_eq!(sseen.down, vec![1, 1, 1], "{opts}: server");
    assert_eq!(sseen.up, vec![1, 1, 1], "{opts}: server");
    let (sa, sb) = (mr(&ep_a).stats(), mr(&ep_b).stats());
    println!("{opts}: {round} rounds; client {sa:?}; server {sb:?}");
    for s in [sa, sb] {
        assert_eq!((s.rails, s.rails_live, s.rails_down, s.rails_up), (2, 2, 3, 3), "{opts}");
    }
    assert!(
        sa.rejoin_attempts >= 3 && sa.rejoin_failures == sa.rejoin_attempts - 3,
        "{opts}: {sa:?}"
    );
}

#[test]
fn a_cut_rail_rejoins_three_times_pinned_even() {
    run("engine=pinned;policy=even", 81, 7681);
}

#[test]
fn a_cut_rail_rejoins_three_times_inline_adaptive() {
    run("engine=inline;policy=adaptive", 82, 7682);
}

#[test]
fn a_cut_rail_rejoins_three_times_fork_join_even() {
    run("engine=fork-join;policy=even", 83, 7683);
}

/// A rejoin request for the live session that does not prove the key, and
/// one for a session nobody has, are refused, and change nothing.
fn forged_rejoins_are_refused(
    ep_a: &Arc<dyn Ep>,
    ep_b: &Arc<dyn Ep>,
    rail1: &str,
    me: &str,
    service: u16,
) {
    let note = rmr_api::provider::conformance::ep_note(&**ep_a, "session");
    let session = u64::from_str_radix(&note, 16).expect("the session note");
    let raw = rmr_api::open(&format!("tcp:{me}")).unwrap();
    let (pz, evd) = (raw.create_pz().unwrap(), raw.create_evd().unwrap());
    for (what, s) in [("a wrong key", session), ("an unknown session", session ^ 1)] {
        let mut pd = b"MRR1".to_vec();
        pd.extend_from_slice(&s.to_le_bytes());
        pd.extend_from_slice(&[1, 2]);
        pd.extend_from_slice(&1000u32.to_le_bytes());
        pd.extend_from_slice(&[0x5a; 16]);
        let ep = raw.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
        match ep.connect(rail1, service, &pd, WAIT) {
            Err(rmr_api::Error::Rejected { private_data }) => {
                assert_eq!(private_data, b"rejoin refused", "{what}");
            }
            r => panic!("a rejoin with {what} was not refused: {r:?}"),
        }
    }
    let s = mr(ep_b).stats();
    assert_eq!((s.rails_live, s.rails_down, s.rails_up), (2, 0, 0), "{s:?}");
}

/// A rail lost at one end only: the proxy stops forwarding rail 1 (both
/// connections stay open), the client's stalled stripes end its rail 1
/// (`PeerStalled` after 1 s, its stall timeout) while the server's end,
/// idle, stays up. The client brings the rail back; the server, asked to
/// rejoin a rail it thinks alive, ends its old one first. Both ends see one
/// `RailDown`/`RailUp` pair, every write lands, and rail 1 carries stripes
/// again.
#[test]
fn a_rail_lost_at_one_end_only_rejoins() {
    let (net, service) = (85, 7685);
    let target = MemRegion::new(LEN);
    let mut tl = None;
    let p =
        pair_with("threshold=16K", net, service, "stall_timeout_ms=1000", Some(64 << 10), |pz| {
            let l = pz.register_all(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
            let ctx = l.rmr_context().to_bytes().to_vec();
            tl = Some(l);
            ctx
        });
    let sctl = MemRegion::new(64);
    let scl = p.pz_b.register_all(&sctl, Access::LOCAL_WRITE).unwrap();
    let ctx = RmrContext::from_bytes(&p.pd).unwrap();
    let (eb, ev) = (p.ep_b.clone(), p.evd_b.clone());
    let server = std::thread::spawn(move || serve(eb, ev, target, scl, sctl));
    let src = MemRegion::new(LEN);
    let sl = p.pz_a.register_all(&src, Access::empty()).unwrap();
    let ctl = MemRegion::new(64);
    let cl = p.pz_a.register_all(&ctl, Access::LOCAL_WRITE).unwrap();
    let (ep, evd) = (&p.ep_a, &p.evd_a);
    let mut seen = Seen::default();
    // `writes` writes of pattern `k` (the last one notified with its
    // checksum), then the server's verdict.
    let batch = |seen: &mut Seen, k: u64, writes: u64| {
        let pat = pattern(k, LEN);
        src.write(0, &pat).unwrap();
        ctl.store_u64(0, checksum(&pat)).unwrap();
        let f = DtoFlags::empty();
        ep.post_recv(&[Sge::new(&*cl, 8, 8)], Cookie(3 << 40 | k), f).unwrap();
        for w in 0..writes {
            ep.post_rdma_write(&[Sge::whole(&*sl)], ctx.at(0), Cookie(1 << 40 | k << 8 | w), f)
                .unwrap();
        }
        ep.post_send(&[Sge::new(&*cl, 0, 8)], Cookie(2 << 40 | k), f).unwrap();
        let mut left = writes + 2;
        while left > 0 {
            match evd.wait(Some(WAIT), 1).expect("client: an event") {
                Event::Dto(c) => {
                    assert_eq!(c.status, Status::Success, "batch {k}: {c:?}");
                    left -= 1;
                }
                Event::Established { .. } => {}
                e if seen.note(&e) => {}
                e => panic!("client: {e:?}"),
            }
        }
        assert_eq!(ctl.load_u64(8).unwrap(), 1, "batch {k}: the server found the data damaged");
        ctl.store_u64(8, 7).unwrap();
    };
    batch(&mut seen, 1, 2);
    p.proxy.stall();
    // 8 MiB, half of it for rail 1: more than the stalled sockets hold.
    batch(&mut seen, 2, 32);
    assert_eq!(seen.down, vec![1], "the client lost rail 1: {seen:?}");
    let t = Instant::now();
    let mut k = 3;
    while seen.up.is_empty() {
        assert!(t.elapsed() < WAIT, "rail 1 not back: {seen:?}, {:?}", mr(ep).stats());
        batch(&mut seen, k, 1);
        k += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = p.proxy.bytes();
    for _ in 0..4 {
        batch(&mut seen, k, 1);
        k += 1;
    }
    let carried = p.proxy.bytes() - before;
    assert!(carried > LEN as u64 / 4, "after the rejoin rail 1 carried {carried} bytes");
    ctl.store_u64(0, 0).unwrap();
    ep.post_send(&[Sge::new(&*cl, 0, 8)], Cookie(9 << 40), DtoFlags::SUPPRESS).unwrap();
    let (good, bad, sseen) = server.join().unwrap();
    assert_eq!((good, bad), (k - 1, 0), "batches checked by the server");
    println!("client {seen:?} {:?}; server {sseen:?} {:?}", mr(ep).stats(), mr(&p.ep_b).stats());
    assert_eq!((seen.down, seen.up), (vec![1], vec![1]), "client");
    assert_eq!((sseen.down, sseen.up), (vec![1], vec![1]), "server");
    drop(tl);
}

/// With `rejoin=0` a cut rail stays lost: `RailDown`, no attempt.
#[test]
fn rejoin_off_leaves_the_rail_lost() {
    run_off(84, 7684);
}

fn run_off(net: u8, service: u16) {
    // (All of the pair kept: the server's end lives to the end.)
    let p = pair("rejoin=0", net, service, |_| Vec::new());
    let (evd_a, ep_a, proxy) = (&p.evd_a, &p.ep_a, &p.proxy);
    proxy.cut();
    let mut seen = Seen::default();
    let t = Instant::now();
    while seen.down.is_empty() && t.elapsed() < WAIT {
        if let Ok(e) = evd_a.wait(Some(Duration::from_millis(50)), 1) {
            seen.note(&e);
        }
    }
    assert_eq!(seen.down, vec![1]);
    std::thread::sleep(Duration::from_millis(800));
    let s = mr(ep_a).stats();
    assert_eq!((s.rails_live, s.rails_down, s.rails_up, s.rejoin_attempts), (1, 1, 0, 0), "{s:?}");
    assert!(rmr_api::provider::conformance::ep_note(&**ep_a, "rejoin").contains("off"));
}
