// A vector handed to a region is the region's: the application cannot keep
// using (or freeing) it while a peer may write it.
fn main() {
    let samples = vec![0u8; 4096];
    let region = rmr::MemRegion::from_vec(samples);
    println!("{}", samples.len());
    drop(region);
}
