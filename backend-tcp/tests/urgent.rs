//! `DtoFlags::URGENT`: a DTO whose initiator is about to wait for it is
//! acknowledged at once, not after the peer's acknowledgement delay. Both
//! ends here delay acknowledgements by 30 s, so a plain signalled write
//! completes only when some frame carries its acknowledgement, and an
//! urgent one (whose acknowledgement also covers everything before it)
//! completes as soon as the peer has placed it.

use backend_tcp::{TcpConfig, TcpIa};
use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, Ep, EpEvds, Error, Event, Ia, MemRegion, Sge};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

const SLOW_ACK: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

fn ia() -> Arc<dyn Ia> {
    let cfg = TcpConfig { ack_delay: SLOW_ACK, ..TcpConfig::default() };
    Arc::new(TcpIa::with_config(IpAddr::V4(Ipv4Addr::LOCALHOST), cfg).unwrap())
}

#[test]
fn an_urgent_write_is_acknowledged_without_the_ack_delay() {
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
    assert!(matches!(evd_a.wait(Some(WAIT), 1), Ok(Event::Established { .. })));

    let src = MemRegion::new(4096);
    src.write(0, &[7u8; 4096]).unwrap();
    let lsrc = pz_a.register_all(&src, Access::empty()).unwrap();
    let dst = MemRegion::new(8192);
    let ldst = pz_b.register_all(&dst, Access::REMOTE_WRITE).unwrap();
    let ctx = ldst.rmr_context();

    // A plain signalled write: placed at once, acknowledged only after 30 s
    // (nothing flows back to carry the acknowledgement sooner).
    ep_a.post_rdma_write(&[Sge::whole(&*lsrc)], ctx.at(0), Cookie(1), DtoFlags::empty()).unwrap();
    let early = evd_a.wait(Some(Duration::from_millis(300)), 1);
    assert!(
        matches!(early, Err(Error::Timeout)),
        "a plain write completed before its delayed acknowledgement: {early:?}"
    );
    // An urgent one: acknowledged as soon as it is placed; its
    // acknowledgement completes the earlier write too, in order.
    ep_a.post_rdma_write(&[Sge::whole(&*lsrc)], ctx.at(4096), Cookie(2), DtoFlags::URGENT).unwrap();
    for want in [1, 2] {
        match evd_a.wait(Some(WAIT), 1) {
            Ok(Event::Dto(c)) => {
                c.result().unwrap();
                assert_eq!(c.cookie.0, want, "completions out of order");
            }
            other => {
                panic!("expected write {want} to complete well before the ack delay: {other:?}")
            }
        }
    }
    assert_eq!(dst.to_vec(0, 8192).unwrap(), vec![7u8; 8192]);
}
