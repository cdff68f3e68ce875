// The buffer comes back only through the region itself, which registrations
// share: it cannot be moved out of the `Arc` they hold.
fn main() -> rmr::Result<()> {
    let ia = rmr::open("tcp:127.0.0.1")?;
    let pz = ia.create_pz()?;
    let region = rmr::MemRegion::from_vec(vec![0u8; 4096]);
    let _lmr = pz.register_all(&region, rmr::Access::REMOTE_WRITE)?;
    let _back: Vec<u8> = region.into_vec().unwrap();
    Ok(())
}
