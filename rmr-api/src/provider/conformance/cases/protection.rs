//! Protection: bad keys, out-of-bounds ranges, missing rights, regions of
//! another PZ or deregistered: typed errors, and the target untouched.

use super::*;

pub fn bad_key(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 4096, RW, 0x33);
    let src = Buf::new(&p.pz_a, 4096, RW, 0x44);
    let good = target.ctx();
    let keys: Vec<u64> = good.keys().iter().map(|k| k ^ 0x5a5a_5a5a_0000_0001).collect();
    let forged = RmrContext::with_keys(&keys, good.addr, good.len).unwrap();
    p.a.post_rdma_write(&[src.sge()], forged.at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x33; 4096]);
}

pub fn out_of_bounds_remote(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 4096, RW, 0x33);
    let guard = Buf::new(&p.pz_b, 4096, RW, 0x66);
    let src = Buf::new(&p.pz_a, 8192, RW, 0x44);
    let good = target.ctx();
    // A forged context claiming a longer region: the target must still refuse.
    let forged = RmrContext::with_keys(good.keys(), good.addr, good.len * 4).unwrap();
    p.a.post_rdma_write(&[src.part(0, 100)], forged.at(4090), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x33; 4096]);
    assert_eq!(guard.bytes(), vec![0x66; 4096]);
    let before = Pair::new(t);
    drop(before);
}

pub fn out_of_bounds_local_rejected_at_post(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 4096, RW, 0);
    let src = Buf::new(&p.pz_a, 100, RW, 0);
    let r = p.a.post_rdma_write(&[src.part(50, 51)], target.ctx().at(0), Cookie(1), F0);
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    let r = p.a.post_rdma_write(&[src.sge()], target.ctx().at(4000), Cookie(1), F0);
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    let r = p.a.post_recv(&[src.part(0, 101)], Cookie(1), F0);
    assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{r:?}");
    assert!(p.evd_a.dequeue().is_none());
}

pub fn missing_remote_write_right(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 512, Access::REMOTE_READ | Access::LOCAL_WRITE, 0x21);
    let src = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x21; 512]);
}

pub fn read_of_write_only_region(t: &Target) {
    let p = Pair::new(t);
    if !p.ia_a.attr().caps.contains(Caps::RDMA_READ) {
        return skip(t, "provider has no RDMA read");
    }
    let target = Buf::new(&p.pz_b, 512, Access::REMOTE_WRITE | Access::LOCAL_WRITE, 0x21);
    let dst = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_read(&[dst.sge()], target.ctx().at(0), Cookie(1), F0).unwrap();
    let c = next_dto(&p.evd_a);
    assert!(!c.status.is_ok(), "read of a write-only region succeeded");
    assert_eq!(dst.bytes(), vec![0x99; 512], "refused read still delivered data");
}

pub fn lmr_of_another_pz(t: &Target) {
    let p = Pair::new(t);
    let other_pz = p.ia_b.create_pz().unwrap();
    let target = Buf::new(&other_pz, 512, RW, 0x21);
    let src = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x21; 512]);
}

pub fn deregistered_lmr(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 512, RW, 0x21);
    let ctx = target.ctx();
    target.lmr.deregister().unwrap();
    assert!(!target.lmr.is_registered());
    let src = Buf::new(&p.pz_a, 512, RW, 0x99);
    p.a.post_rdma_write(&[src.sge()], ctx.at(0), Cookie(1), F0).unwrap();
    expect_remote_fault(&p, 1, &target, &[0x21; 512]);
}

pub fn local_lmr_of_another_pz_rejected(t: &Target) {
    let p = Pair::new(t);
    let other = p.ia_a.create_pz().unwrap();
    let src = Buf::new(&other, 64, RW, 0);
    let target = Buf::new(&p.pz_b, 64, RW, 0);
    let r = p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(1), F0);
    assert!(matches!(r, Err(Error::Protection(_))), "{r:?}");
    let r = p.a.post_recv(&[src.sge()], Cookie(1), F0);
    assert!(matches!(r, Err(Error::Protection(_))), "{r:?}");
}

/// An LMR whose own account claims more bytes than its region holds.
/// `Lmr` is a safe trait, so an application can write one; a backend must
/// check a segment against the region itself before it moves bytes
/// through raw pointers (`seg_place`), not only against the LMR's `len`.
struct Overclaiming(Arc<dyn Lmr>, u64);

impl Lmr for Overclaiming {
    fn region(&self) -> &Arc<MemRegion> {
        self.0.region()
    }
    fn offset(&self) -> u64 {
        self.0.offset()
    }
    fn len(&self) -> u64 {
        self.0.len() + self.1
    }
    fn access(&self) -> Access {
        self.0.access()
    }
    fn pz_id(&self) -> u64 {
        self.0.pz_id()
    }
    fn rmr_context(&self) -> RmrContext {
        self.0.rmr_context()
    }
    fn is_registered(&self) -> bool {
        self.0.is_registered()
    }
    fn deregister(&self) -> crate::error::Result<()> {
        self.0.deregister()
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self.0.as_any()
    }
}

pub fn lmr_claiming_more_than_its_region(t: &Target) {
    let p = Pair::new(t);
    let target = Buf::new(&p.pz_b, 16384, RW, 0x33);
    let src = Buf::new(&p.pz_a, 4096, RW, 0x44);
    let liar = Overclaiming(src.lmr.clone(), 1 << 20);
    // Twice the region: what lies past it is this process's other memory.
    let over = Sge::new(&liar, 0, 8192);
    let refused = |what: &str, r: crate::error::Result<()>| {
        assert!(matches!(r, Err(Error::OutOfBounds { .. })), "{what} past the region: {r:?}");
    };
    refused("a send", p.a.post_send(&[over], Cookie(1), F0));
    refused("a receive", p.a.post_recv(&[over], Cookie(2), F0));
    refused("an RDMA write", p.a.post_rdma_write(&[over], target.ctx().at(0), Cookie(3), F0));
    if p.ia_a.attr().caps.contains(Caps::RDMA_READ) {
        refused("an RDMA read", p.a.post_rdma_read(&[over], target.ctx().at(0), Cookie(4), F0));
    }
    assert!(p.evd_a.dequeue().is_none(), "a refused post completed");
    assert_eq!(target.bytes(), vec![0x33; 16384], "a refused post reached the target");
    assert_eq!(src.bytes(), vec![0x44; 4096], "a refused post changed its own region");
    // Within the region the same LMR works.
    p.a.post_rdma_write(&[Sge::new(&liar, 0, 4096)], target.ctx().at(0), Cookie(5), F0).unwrap();
    let c = next_dto(&p.evd_a);
    assert!(c.status.is_ok() && c.cookie.0 == 5, "{c:?}");
    assert_eq!(target.bytes()[..4096], [0x44; 4096]);
}
