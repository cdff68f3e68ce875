use rmr::{DtoFlags, Ep, Lmr, Sge};
fn post(ep: &dyn Ep, lmr: &dyn Lmr) -> rmr::Result<()> {
    ep.post_send(&[Sge::whole(lmr)], 7, DtoFlags::empty())
}
fn main() {
    let _ = post;
}
