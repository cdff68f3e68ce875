fn main() {
    let samples = vec![0u8; 4096];
    let _region = rmr::MemRegion::from_vec(samples);
    drop(samples);
}
