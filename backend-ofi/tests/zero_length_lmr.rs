//! A zero-length registration reaches nothing. libfabric registers at
//! least one byte; a zero-length LMR at a region's very end used to
//! register the byte past it (memory of another allocation) with the
//! rights asked for. Now the byte registered is the region's first, with no
//! remote rights: a peer that forges a one-byte context from the LMR's key
//! gets a failed write, and no byte changes. Real `tcp` provider, loopback.

use rmr_api::provider::conformance::{Pair, Target};
use rmr_api::{Access, Cookie, DtoFlags, MemRegion, RmrContext, Sge};
use std::time::Duration;

#[test]
fn a_zero_length_lmr_grants_no_byte() {
    let t = Target::new("ofi-tcp", backend_ofi::register, "ofi:tcp:127.0.0.1", "ofi:tcp:127.0.0.1");
    let p = Pair::new(&t);
    let target = MemRegion::new(4096);
    target.fill(0, 4096, 0x5a).unwrap();
    let at_end = p.pz_b.register(&target, 4096, 0, Access::ALL).unwrap();
    let ctx = at_end.rmr_context();
    assert_eq!(ctx.len, 0);
    // The peer forges one byte at the LMR's own address, and one at the
    // region's start (what is registered underneath).
    let src = MemRegion::new(64);
    src.fill(0, 64, 0xff).unwrap();
    let lsrc = p.pz_a.register_all(&src, Access::ALL).unwrap();
    for (i, addr) in [ctx.addr, target.addr()].into_iter().enumerate() {
        let forged = RmrContext::with_keys(ctx.keys(), addr, 1).unwrap();
        let cookie = Cookie(i as u64 + 1);
        p.a.post_rdma_write(&[Sge::new(&*lsrc, 0, 1)], forged.at(0), cookie, DtoFlags::empty())
            .unwrap();
        match p.evd_a.wait(Some(Duration::from_secs(10)), 1) {
            Ok(rmr_api::Event::Dto(c)) => {
                assert_eq!(c.cookie, cookie);
                assert!(!c.status.is_ok(), "a write through a zero-length LMR succeeded: {c:?}");
            }
            other => panic!("no completion for the forged write: {other:?}"),
        }
    }
    assert_eq!(target.to_vec(0, 4096).unwrap(), vec![0x5a; 4096], "a byte changed");
}
