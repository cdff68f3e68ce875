//! The libfabric backend under hostile input, on the `tcp` and `sockets`
//! providers, with real endpoints over loopback:
//! - connection requests whose private data is not rmr's (empty, short,
//!   a wrong magic, a reject header, noise) are refused, never reach the
//!   application as requests, and leave the listener serving;
//! - a well-formed header naming a forged control word connects, and the
//!   peer that accepted it ends in a typed state, never a crash;
//! - forged remote contexts (a key of another region, a read-only key for a
//!   write, random keys, a valid key with an address below, across or past
//!   its region) never reach memory not granted; a key nobody was given or
//!   a read-only key for a write always fails;
//! - a peer process killed in the middle of a stream of writes and sends
//!   breaks the endpoint in bounded time, every posted receive completes
//!   exactly once, and the listener accepts again.

use backend_ofi::{OfiEp, hostile};
use rmr_api::{
    Access, Cookie, DtoFlags, Ep, EpEvds, EpState, Evd, Event, Ia, MemRegion, Psp, Pz, RmrContext,
    Sge, Status,
};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROVIDERS: [&str; 2] = ["tcp", "sockets"];
const WAIT: Duration = Duration::from_secs(15);
/// The child's role: `<provider>:<address>:<service>`.
const ROLE: &str = "RMR_TEST_OFI_HOSTILE_ROLE";

struct Side {
    ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
    pevd: Arc<dyn Evd>,
    psp: Arc<dyn Psp>,
}

fn side(prov: &str) -> Side {
    backend_ofi::register();
    let ia = rmr_api::open(&format!("ofi:{prov}:127.0.0.1")).unwrap();
    let (pz, pevd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    Side { ia, pz, pevd, psp }
}

impl Side {
    fn ep(&self) -> (Arc<dyn Ep>, Arc<dyn Evd>) {
        let evd = self.ia.create_evd().unwrap();
        (self.ia.create_ep(&self.pz, &EpEvds::single(&evd)).unwrap(), evd)
    }

    /// Accepts the next request onto a fresh EP, answering `reply`.
    fn accept(&self, reply: &[u8]) -> (Arc<dyn Ep>, Arc<dyn Evd>) {
        let (ep, evd) = self.ep();
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.pevd.wait(Some(left), 1).expect("a connection request") {
                Event::ConnectionRequest(cr) => {
                    cr.accept(&ep, reply).unwrap();
                    return (ep, evd);
                }
                other => println!("psp event: {other:?}"),
            }
        }
    }

    /// A connected pair: a fresh EP here connected to one accepted here.
    fn pair(&self) -> [(Arc<dyn Ep>, Arc<dyn Evd>); 2] {
        let (a, aevd) = self.ep();
        let (addr, svc) = (self.psp.address(), self.psp.service());
        std::thread::scope(|s| {
            let a2 = a.clone();
            let h = s.spawn(move || a2.connect(&addr, svc, b"", WAIT).unwrap());
            let b = self.accept(b"");
            h.join().unwrap();
            [(a, aevd), b]
        })
    }
}

fn ofi(ep: &Arc<dyn Ep>) -> &OfiEp {
    ep.as_any().downcast_ref::<OfiEp>().expect("an ofi EP")
}

#[test]
fn connection_data_that_is_not_rmrs_is_refused_and_the_listener_goes_on() {
    for prov in PROVIDERS {
        let s = side(prov);
        let (addr, svc) = (s.psp.address(), s.psp.service());
        let mut noise = vec![0u8; 200];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in &mut noise {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let cases: [(&str, Vec<u8>); 6] = [
            ("empty", vec![]),
            ("three bytes", vec![1, 2, 3]),
            ("the magic alone", b"RMO3".to_vec()),
            ("a wrong magic", [b"RMOX".as_slice(), &[0u8; 20]].concat()),
            ("a reject header", [b"RMOR".as_slice(), &[0u8; 20]].concat()),
            ("noise", noise),
        ];
        for (what, cm) in cases {
            let (ep, _evd) = s.ep();
            let t0 = Instant::now();
            let r = hostile::connect_with_cm_data(ofi(&ep), &addr, svc, &cm, WAIT);
            assert!(r.is_err(), "{prov}, {what}: connected: {r:?}");
            assert!(t0.elapsed() < WAIT + Duration::from_secs(5), "{prov}, {what}: unbounded");
            assert_ne!(ep.state(), EpState::Connected, "{prov}, {what}");
            // Nothing reached the application as a request.
            std::thread::sleep(Duration::from_millis(20));
            while let Some(ev) = s.pevd.dequeue() {
                assert!(!matches!(ev, Event::ConnectionRequest(_)), "{prov}, {what}: {ev:?}");
            }
            println!("{prov}: {what}: refused ({:?})", r.unwrap_err());
        }
        // The listener still serves an honest peer.
        let [(a, _), (b, _)] = s.pair();
        assert_eq!((a.state(), b.state()), (EpState::Connected, EpState::Connected), "{prov}");
    }
}

#[test]
fn a_forged_control_word_in_a_well_formed_header_ends_in_a_typed_state() {
    for prov in PROVIDERS {
        let s = side(prov);
        let (addr, svc) = (s.psp.address(), s.psp.service());
        // Memory of the connector's that no one was granted.
        let canary = MemRegion::new(4096);
        canary.fill(0, 4096, 0x5a).unwrap();
        let _cl = s.pz.register_all(&canary, Access::LOCAL_WRITE).unwrap();
        let (ep, evd) = s.ep();
        let mut cm = hostile::cm_header(ofi(&ep));
        // The control word's key and address: someone else's (the canary's).
        cm[8..16].copy_from_slice(&0x0bad_c0de_u64.to_le_bytes());
        cm[16..24].copy_from_slice(&canary.addr().to_le_bytes());
        let (server, sevd) = std::thread::scope(|sc| {
            let h = sc.spawn(|| hostile::connect_with_cm_data(ofi(&ep), &addr, svc, &cm, WAIT));
            let b = s.accept(b"");
            let r = h.join().unwrap();
            println!("{prov}: forged header: connect {r:?}");
            b
        });
        // The acceptor uses the connection (a send, a write-with-immediate
        // where the provider has one) and closes it: each ends in a
        // completion or a typed end, never a hang or a crash.
        let src = MemRegion::new(64);
        let sl = s.pz.register_all(&src, Access::empty()).unwrap();
        let inbox = MemRegion::new(64);
        let il = s.pz.register_all(&inbox, Access::LOCAL_WRITE).unwrap();
        let _ = ep.post_recv(&[Sge::new(&*il, 0, 64)], Cookie(1), DtoFlags::empty());
        if server.post_send(&[Sge::new(&*sl, 0, 8)], Cookie(2), DtoFlags::empty()).is_ok() {
            assert!(dto_or_end(&sevd, &server, Cookie(2)), "{prov}: the send ended");
        }
        let _ = server.disconnect();
        let _ = ep.disconnect();
        drain(&evd);
        drain(&sevd);
        assert!(
            (0..4096).all(|i| canary.to_vec(i, 1).unwrap()[0] == 0x5a),
            "{prov}: memory nobody granted was written"
        );
        // The listener still serves an honest peer.
        // (Both ends held: dropping one disconnects the other.)
        let [(a, _), (_b, _)] = s.pair();
        assert_eq!(a.state(), EpState::Connected, "{prov}");
    }
}

/// Waits for `cookie`'s completion (any status) or the end of `ep`.
fn dto_or_end(evd: &Arc<dyn Evd>, ep: &Arc<dyn Ep>, cookie: Cookie) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        match evd.wait(Some(Duration::from_millis(200)), 1) {
            Ok(Event::Dto(c)) if c.cookie == cookie => return true,
            Ok(Event::Broken { .. } | Event::Disconnected { .. }) => return true,
            _ if matches!(ep.state(), EpState::Broken | EpState::Disconnected) => return true,
            _ => {}
        }
    }
    false
}

fn drain(evd: &Arc<dyn Evd>) {
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        if evd.dequeue().is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn forged_remote_contexts_never_reach_memory_not_granted() {
    const PAGE: u64 = 4096;
    for prov in PROVIDERS {
        let s = side(prov);
        // Three pages: only the middle one is granted for writing; a
        // second region is granted for reading only.
        let target = MemRegion::new(3 * PAGE as usize);
        target.fill(0, 3 * PAGE, 0x11).unwrap();
        let tl = s.pz.register(&target, PAGE, PAGE, Access::REMOTE_WRITE | Access::LOCAL_WRITE);
        let tl = tl.unwrap();
        let ro = MemRegion::new(PAGE as usize);
        ro.fill(0, PAGE, 0x22).unwrap();
        let rl = s.pz.register_all(&ro, Access::REMOTE_READ).unwrap();
        let (good, rkey) = (tl.rmr_context(), rl.rmr_context());
        let src = MemRegion::new(64);
        src.fill(0, 64, 0xee).unwrap();
        let sl = s.pz.register_all(&src, Access::empty()).unwrap();
        let mut forged = vec![
            ("a valid key, 8 bytes below", RmrContext::new(good.key(), good.addr - 8, 16)),
            ("a valid key, across the end", RmrContext::new(good.key(), good.addr + PAGE - 4, 16)),
            ("a valid key, past the end", RmrContext::new(good.key(), good.addr + PAGE, 16)),
            ("a read-only key for a write", RmrContext::new(rkey.key(), rkey.addr, 16)),
            (
                "the writable key on the read-only region",
                RmrContext::new(good.key(), rkey.addr, 16),
            ),
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            forged.push(("a random key", RmrContext::new(x, good.addr, 16)));
        }
        let mut pair = s.pair();
        for (i, (what, ctx)) in forged.iter().enumerate() {
            if pair[0].0.state() != EpState::Connected {
                pair = s.pair(); // a provider may end the connection on a bad access
            }
            let (a, aevd) = &pair[0];
            let cookie = Cookie(100 + i as u64);
            match a.post_rdma_write(&[Sge::new(&*sl, 0, 8)], ctx.at(0), cookie, DtoFlags::empty()) {
                Err(e) => println!("{prov}: {what}: refused at post ({e})"),
                Ok(()) => {
                    let st = status_of(aevd, a, cookie);
                    println!("{prov}: {what}: {st:?}");
                    // A key nobody was given, or a read-only key for a
                    // write, never succeeds. (A provider that addresses a
                    // region by offset from its start, not by virtual
                    // address, takes a forged base address as the region's
                    // start: such a write lands in the granted page, which
                    // is allowed.)
                    if what.contains("random") || what.contains("read-only key") {
                        assert!(!matches!(st, Some(Status::Success)), "{prov}: {what} succeeded");
                    }
                }
            }
            // Whatever happened, nothing outside the granted page moved.
            let around = [target.to_vec(0, PAGE as usize), target.to_vec(2 * PAGE, PAGE as usize)];
            for part in around {
                assert!(part.unwrap().iter().all(|&b| b == 0x11), "{prov}: {what} wrote outside");
            }
            assert!(
                ro.to_vec(0, PAGE as usize).unwrap().iter().all(|&b| b == 0x22),
                "{prov}: {what}"
            );
        }
        // The granted page still takes a proper write.
        let pair = s.pair();
        let (a, aevd) = &pair[0];
        a.post_rdma_write(&[Sge::new(&*sl, 0, 8)], good.at(0), Cookie(9), DtoFlags::empty())
            .unwrap();
        assert_eq!(status_of(aevd, a, Cookie(9)), Some(Status::Success), "{prov}");
        assert_eq!(target.to_vec(PAGE, 8).unwrap(), vec![0xee; 8], "{prov}");
    }
}

/// The status `cookie` completed with, or `None` when the EP ended first.
fn status_of(evd: &Arc<dyn Evd>, ep: &Arc<dyn Ep>, cookie: Cookie) -> Option<Status> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        match evd.wait(Some(Duration::from_millis(200)), 1) {
            Ok(Event::Dto(c)) if c.cookie == cookie => return Some(c.status),
            _ if matches!(ep.state(), EpState::Broken | EpState::Disconnected) => {
                // Its flush may still be queued.
                while let Some(ev) = evd.dequeue() {
                    if let Event::Dto(c) = ev {
                        if c.cookie == cookie {
                            return Some(c.status);
                        }
                    }
                }
                return None;
            }
            _ => {}
        }
    }
    panic!("no completion and no end for {cookie:?}");
}

#[test]
fn a_peer_killed_mid_transfer_breaks_the_endpoint_in_bounded_time() {
    if let Ok(role) = std::env::var(ROLE) {
        return writer(&role);
    }
    const RECVS: u64 = 64;
    for prov in PROVIDERS {
        let s = side(prov);
        let target = MemRegion::new(1 << 20);
        let tl = s.pz.register_all(&target, Access::REMOTE_WRITE | Access::LOCAL_WRITE).unwrap();
        let inbox = MemRegion::new(64 * RECVS as usize);
        let il = s.pz.register_all(&inbox, Access::LOCAL_WRITE).unwrap();
        let (ep, evd) = s.ep();
        for i in 0..RECVS {
            ep.post_recv(&[Sge::new(&*il, 64 * i, 64)], Cookie(i), DtoFlags::empty()).unwrap();
        }
        let role = format!("{prov}:{}:{}", s.psp.address(), s.psp.service());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "a_peer_killed_mid_transfer_breaks_the_endpoint_in_bounded_time",
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(ROLE, role)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Accept the writer onto `ep`, telling it where to write.
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Event::ConnectionRequest(cr) = s.pevd.wait(Some(left), 1).expect("the writer") {
                cr.accept(&ep, &tl.rmr_context().to_bytes()).unwrap();
                break;
            }
        }
        // Let the stream run until receives land, then kill the writer.
        let mut done = vec![0u32; RECVS as usize];
        let mut got = 0;
        let t0 = Instant::now();
        while got < 4 {
            assert!(t0.elapsed() < WAIT, "{prov}: the writer's sends never came");
            if let Ok(Event::Dto(c)) = evd.wait(Some(Duration::from_millis(100)), 1) {
                assert_eq!(c.status, Status::Success, "{prov}");
                done[c.cookie.0 as usize] += 1;
                got += 1;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let killed = Instant::now();
        // The EP ends, in bounded time, and every receive completes once.
        let mut ended = false;
        while !(ended && done.iter().all(|&n| n == 1)) {
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "{prov}: ended {ended}, receives {done:?}"
            );
            match evd.wait(Some(Duration::from_millis(200)), 1) {
                Ok(Event::Dto(c)) => done[c.cookie.0 as usize] += 1,
                Ok(Event::Broken { .. } | Event::Disconnected { .. }) => ended = true,
                _ if !ended && matches!(ep.state(), EpState::Broken | EpState::Disconnected) => {
                    ended = true
                }
                _ => {}
            }
            if ended && done.contains(&0) {
                // Receives still posted on an ended EP are flushed when it
                // is closed.
                let _ = ep.disconnect();
            }
            assert!(done.iter().all(|&n| n <= 1), "{prov}: a receive completed twice");
        }
        println!("{prov}: ended {:?} after the kill", killed.elapsed());
        // The listener accepts again (both ends held: dropping one
        // disconnects the other).
        let [(a, _), (_b, _)] = s.pair();
        assert_eq!(a.state(), EpState::Connected, "{prov}");
    }
}

/// The child: connects and writes and sends until it is killed.
fn writer(role: &str) {
    let (prov, rest) = role.split_once(':').unwrap();
    let (addr, svc) = rest.rsplit_once(':').unwrap();
    let s = side(prov);
    let (ep, evd) = s.ep();
    let pd = ep.connect(addr, svc.parse().unwrap(), b"", WAIT).unwrap();
    let ctx = RmrContext::from_bytes(&pd).unwrap();
    let src = MemRegion::new(64 << 10);
    let sl = s.pz.register_all(&src, Access::empty()).unwrap();
    for i in 0u64.. {
        let r = if i % 8 == 0 {
            ep.post_send(&[Sge::new(&*sl, 0, 64)], Cookie(i), DtoFlags::empty())
        } else {
            let off = (i * (64 << 10)) % (ctx.len - (64 << 10));
            ep.post_rdma_write(
                &[Sge::new(&*sl, 0, 64 << 10)],
                ctx.at(off),
                Cookie(i),
                DtoFlags::empty(),
            )
        };
        if r.is_err() {
            while evd.dequeue().is_some() {}
            std::thread::sleep(Duration::from_millis(1));
        }
        while evd.dequeue().is_some() {}
    }
}
