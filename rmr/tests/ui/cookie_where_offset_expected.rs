use rmr::{Cookie, DtoFlags, Ep, Lmr, RmrContext, Sge};
fn post(ep: &dyn Ep, lmr: &dyn Lmr, peer: &RmrContext) -> rmr::Result<()> {
    // The offset and the cookie swapped.
    ep.post_rdma_write(&[Sge::whole(lmr)], peer.at(Cookie(7)), 4096, DtoFlags::empty())
}
fn main() {
    let _ = post;
}
