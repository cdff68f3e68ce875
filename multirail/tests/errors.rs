//! An error completion of a multirail DTO names the rail whose stripe
//! failed, and its error says so: a key forged for rail 1 only fails there.

use rmr_api::provider::conformance::{Buf, Pair, Target, WAIT};
use rmr_api::{Access, Cookie, DtoFlags, Error, Event, RmrContext, Status};

fn target() -> Target {
    let register = || {
        backend_tcp::register();
        multirail::register();
    };
    let s = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=inline;policy=even;threshold=1K";
    Target::new("multirail-2-inline", register, s, s)
}

#[test]
fn a_failed_stripe_names_its_rail() {
    let p = Pair::new(&target());
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let dst = Buf::new(&p.pz_b, 64 << 10, rw, 0x33);
    let src = Buf::new(&p.pz_a, 64 << 10, rw, 0x44);
    let good = dst.ctx();
    // Rail 0's key is right, rail 1's is forged: only rail 1's stripe fails.
    let keys = [good.keys()[0], good.keys()[1] ^ 0x5a5a_5a5a_0000_0001];
    let forged = RmrContext::with_keys(&keys, good.addr, good.len).unwrap();
    p.a.post_rdma_write(&[src.sge()], forged.at(0), Cookie(7), DtoFlags::empty()).unwrap();
    let c = loop {
        match p.evd_a.wait(Some(WAIT), 1).unwrap() {
            Event::Dto(c) => break c,
            _ => continue,
        }
    };
    assert_eq!((c.cookie, c.status, c.rail), (Cookie(7), Status::BadKey, Some(1)), "{c:?}");
    let e = c.result().unwrap_err();
    assert!(matches!(e, Error::Dto { status: Status::BadKey, rail: Some(1), .. }), "{e:?}");
    assert!(e.to_string().contains("(rail 1)"), "{e}");
}
