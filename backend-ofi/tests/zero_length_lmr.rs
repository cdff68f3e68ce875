//! A zero-length registration reaches nothing. The backend registers at
//! least one byte with libfabric; a zero-length LMR at a region's very end used to
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
    // The peer forges one byte at the LMR's own address, then (on a new
    // connection: the provider ends one after a refused access) one at the
    // region's start, what is registered underneath.
    for at_start in [false, true] {
        let p = Pair::new(&t);
        let target = MemRegion::new(4096);
        target.fill(0, 4096, 0x5a).unwrap();
        let at_end = p.pz_b.register(&target, 4096, 0, Access::ALL).unwrap();
        let ctx = at_end.rmr_context();
        assert_eq!(ctx.len, 0);
        let src = MemRegion::new(64);
        src.fill(0, 64, 0xff).unwrap();
        let lsrc = p.pz_a.register_all(&src, Access::ALL).unwrap();
        let addr = if at_start { target.addr() } else { ctx.addr };
        let forged = RmrContext::with_keys(ctx.keys(), addr, 1).unwrap();
        let write = p.a.post_rdma_write(
            &[Sge::new(&*lsrc, 0, 1)],
            forged.at(0),
            Cookie(1),
            DtoFlags::empty(),
        );
        // Refused at post, or failed in its completion; never a success.
        if write.is_ok() {
            match p.evd_a.wait(Some(Duration::from_secs(10)), 1) {
                Ok(rmr_api::Event::Dto(c)) => {
                    assert!(
                        !c.status.is_ok(),
                        "a write through a zero-length LMR succeeded: {c:?}"
                    );
                }
                other => panic!("no completion for the forged write: {other:?}"),
            }
        }
        assert_eq!(target.to_vec(0, 4096).unwrap(), vec![0x5a; 4096], "a byte changed");
        drop(at_end);
    }
}
