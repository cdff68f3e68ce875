//! The send buffer of a connection to a near peer (`near_sndbuf`): over
//! loopback (a round trip of microseconds) both ends set it to the knob's
//! value instead of the kernel's autotuning, `near_sndbuf=0` leaves the
//! kernel's, an explicit `sockbuf` wins, and the EP's `sndbuf` note says
//! which and why. A large write still arrives whole through the small
//! buffer.

use backend_tcp::{TcpConfig, TcpIa};
use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, Event, Ia, MemRegion, Pz, Sge};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

struct Pair {
    ep: [Arc<dyn Ep>; 2],
    evd: [Arc<dyn rmr_api::Evd>; 2],
    pz: [Arc<dyn Pz>; 2],
    _ia: [Arc<dyn Ia>; 2],
}

fn pair(cfg: TcpConfig) -> Pair {
    let ia = || -> Arc<dyn Ia> {
        Arc::new(TcpIa::with_config(IpAddr::V4(Ipv4Addr::LOCALHOST), cfg.clone()).unwrap())
    };
    let (ia_a, ia_b) = (ia(), ia());
    let (pz_a, pz_b) = (ia_a.create_pz().unwrap(), ia_b.create_pz().unwrap());
    let (evd_a, evd_b, psp_evd) =
        (ia_a.create_evd().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let psp = ia_b.create_psp(0, &psp_evd).unwrap();
    let ep_b: Arc<dyn Ep> = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let ep_b2 = ep_b.clone();
    let t = std::thread::spawn(move || match psp_evd.wait(Some(WAIT), 1) {
        Ok(Event::ConnectionRequest(cr)) => cr.accept(&ep_b2, b"").unwrap(),
        e => panic!("{e:?}"),
    });
    let ep_a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    ep_a.connect("127.0.0.1", psp.service(), b"", WAIT).unwrap();
    t.join().unwrap();
    for evd in [&evd_a, &evd_b] {
        assert!(matches!(evd.wait(Some(WAIT), 1), Ok(Event::Established { .. })));
    }
    Pair { ep: [ep_a, ep_b], evd: [evd_a, evd_b], pz: [pz_a, pz_b], _ia: [ia_a, ia_b] }
}

fn note(ep: &Arc<dyn Ep>) -> String {
    let notes = ep.attr().notes;
    notes.into_iter().find(|(k, _)| k == "sndbuf").map(|(_, v)| v).expect("an sndbuf note")
}

#[test]
fn a_near_peer_gets_the_small_send_buffer_and_a_large_write_arrives_whole() {
    let p = pair(TcpConfig::default());
    for ep in &p.ep {
        let n = note(ep);
        assert!(n.starts_with("524288 (near: round trip "), "{n}");
    }
    // 4 MiB through a 512 KiB buffer: every byte lands, in place.
    let len = 4 << 20;
    let src = MemRegion::new(len);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    src.write(0, &pattern).unwrap();
    let lsrc = p.pz[0].register_all(&src, Access::empty()).unwrap();
    let dst = MemRegion::new(len);
    let ldst = p.pz[1].register_all(&dst, Access::REMOTE_WRITE).unwrap();
    p.ep[0]
        .post_rdma_write(
            &[Sge::whole(&*lsrc)],
            ldst.rmr_context().at(0),
            Cookie(9),
            DtoFlags::URGENT,
        )
        .unwrap();
    match p.evd[0].wait(Some(WAIT), 1) {
        Ok(Event::Dto(c)) => {
            assert_eq!(c.cookie, Cookie(9));
            assert!(c.status.is_ok(), "{c:?}");
        }
        e => panic!("{e:?}"),
    }
    let mut got = vec![0u8; len];
    dst.read(0, &mut got).unwrap();
    assert!(got == pattern, "the 4 MiB write arrived changed");
}

#[test]
fn near_sndbuf_zero_leaves_autotuning_and_sockbuf_wins() {
    let p = pair(TcpConfig { near_sndbuf: 0, ..TcpConfig::default() });
    for ep in &p.ep {
        assert_eq!(note(ep), "kernel autotuning (near_sndbuf 0)");
    }
    let p = pair(TcpConfig { sockbuf: Some(1 << 20), ..TcpConfig::default() });
    for ep in &p.ep {
        assert_eq!(note(ep), "1048576 (sockbuf)");
    }
}

#[test]
fn the_knob_parses_from_a_spec_and_a_bad_value_is_refused() {
    let (_, g) =
        rmr_api::settings::Given::split("tcp", "127.0.0.1;near_sndbuf=256K", &backend_tcp::KNOBS)
            .unwrap();
    assert_eq!(TcpConfig::from_given(&g).unwrap().near_sndbuf, 256 << 10);
    let (_, g) =
        rmr_api::settings::Given::split("tcp", "127.0.0.1;near_sndbuf=big", &backend_tcp::KNOBS)
            .unwrap();
    let e = TcpConfig::from_given(&g).unwrap_err();
    assert!(e.to_string().contains("near_sndbuf"), "{e}");
}
