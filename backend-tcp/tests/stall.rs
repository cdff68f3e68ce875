//! A peer that stops reading but still acknowledges TCP (a raw socket that
//! never reads) is cut once frames have waited for it with nothing moving
//! for the stall timeout: the EP ends Broken, its DTOs complete with
//! `Status::Broken`, and posts say `PeerStalled`. A peer that reads slowly
//! is not cut.

mod support;

use backend_tcp::{TcpConfig, TcpIa};
use rmr_api::{
    Access, Cookie, DtoFlags, Ep, EpEvds, EpState, Error, Evd, Event, Ia, Lmr, MemRegion, Pz,
    RmrContext, Sge, Status,
};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::raw::{RawPeer, expect_broken};

const CHUNK: u64 = 256 << 10;

/// An EP accepted from a raw peer on an IA whose EPs are cut after `ms`
/// of a stalled peer.
struct Rig {
    _ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
    raw: RawPeer,
    ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    cevd: Arc<dyn Evd>,
}

fn rig(ms: u64) -> Rig {
    backend_tcp::register();
    let cfg = TcpConfig { stall_timeout: Duration::from_millis(ms), ..TcpConfig::default() };
    let ia: Arc<dyn Ia> =
        Arc::new(TcpIa::with_config(IpAddr::V4(Ipv4Addr::LOCALHOST), cfg).unwrap());
    let pz = ia.create_pz().unwrap();
    let pevd = ia.create_evd().unwrap();
    let psp = ia.create_psp(0, &pevd).unwrap();
    let to = SocketAddr::new(psp.address().parse().unwrap(), psp.service());
    let mut raw = RawPeer::connect(to, b"raw");
    let (evd, cevd) = (ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let evds = EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() };
    let ep = ia.create_ep(&pz, &evds).unwrap();
    match pevd.wait(Some(Duration::from_secs(10)), 1).unwrap() {
        Event::ConnectionRequest(cr) => cr.accept(&ep, b"").unwrap(),
        e => panic!("{e:?}"),
    }
    raw.accepted();
    Rig { _ia: ia, pz, raw, ep, evd, cevd }
}

impl Rig {
    /// Posts signalled 256 KiB RDMA writes toward the raw peer (which never
    /// answers them) until the window is full or `n` went; returns how many
    /// were accepted and the source's registration.
    fn flood(&self, n: u64) -> (u64, Arc<dyn Lmr>) {
        let src = MemRegion::new(CHUNK as usize);
        let lmr = self.pz.register_all(&src, Access::empty()).unwrap();
        let far = RmrContext::new(0xdead, 0x1000, 1 << 30);
        let mut posted = 0;
        for i in 0..n {
            let sge = [Sge::new(&*lmr, 0, CHUNK)];
            match self.ep.post_rdma_write(&sge, far.at(0), Cookie(i), DtoFlags::empty()) {
                Ok(()) => posted += 1,
                Err(Error::QueueFull) => break,
                Err(e) => panic!("post {i}: {e}"),
            }
        }
        (posted, lmr)
    }
}

#[test]
fn a_peer_that_stops_reading_ends_with_peer_stalled() {
    let r = rig(1000);
    // 16 MiB toward a peer that reads nothing: far more than the socket
    // buffers hold, so frames wait in the EP's queue.
    let (posted, lmr) = r.flood(64);
    assert!(posted > 0);
    let reason = expect_broken(&r.cevd);
    assert!(reason.contains("stalled"), "{reason}");
    // Every DTO completes, with the broken status, exactly once.
    let mut seen = vec![false; posted as usize];
    for _ in 0..posted {
        match r.evd.wait(Some(Duration::from_secs(10)), 1).expect("the flushed DTOs") {
            Event::Dto(c) => {
                assert_eq!(c.status, Status::Broken, "{c:?}");
                assert!(!std::mem::replace(&mut seen[c.cookie.0 as usize], true), "twice");
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(r.ep.state(), EpState::Broken);
    let far = RmrContext::new(0xdead, 0x1000, 1 << 30);
    match r.ep.post_rdma_write(&[Sge::new(&*lmr, 0, 8)], far.at(0), Cookie(0), DtoFlags::empty()) {
        Err(Error::PeerStalled { waited }) => assert!(waited >= Duration::from_millis(1000)),
        x => panic!("expected PeerStalled, got {x:?}"),
    }
    drop(r.raw);
}

#[test]
fn a_peer_that_reads_slowly_is_not_cut() {
    let r = rig(1000);
    let (posted, _lmr) = r.flood(32);
    assert!(posted > 0);
    // The peer takes 64 KiB every 200 ms: slower than the EP sends, so
    // frames keep waiting, but bytes keep moving.
    let stop = Arc::new(AtomicBool::new(false));
    let mut s = r.raw.s.try_clone().unwrap();
    let st = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut total = 0usize;
        while !st.load(Ordering::Acquire) {
            s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
            if let Ok(n) = s.read(&mut buf) {
                total += n;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        total
    });
    // Three stall timeouts of slow reading.
    std::thread::sleep(Duration::from_secs(3));
    let txq = r.ep.attr().notes.iter().find(|(k, _)| k == "progress").map(|(_, v)| v.clone());
    stop.store(true, Ordering::Release);
    let read = reader.join().unwrap();
    assert!(read > 0);
    assert_eq!(r.ep.state(), EpState::Connected, "a slow reader was cut; {txq:?}");
    while let Some(ev) = r.cevd.dequeue() {
        assert!(!matches!(ev, Event::Broken { .. }), "{ev:?}");
    }
    println!("RESULT the slow peer read {read} bytes in 3 s; {txq:?}");
    r.raw.s.shutdown(std::net::Shutdown::Both).unwrap();
}
