//! Replays every input kept in `fuzz-regressions/verbs_wr/` (crashes that
//! cargo-fuzz found, once fixed, plus seeds) through the same checks the
//! fuzz target runs (`backend_verbs::fuzzing::peer_bytes`). A plain
//! `cargo test` runs them; no RDMA device is needed.

#[test]
fn replay_verbs_wr() {
    let files =
        rmr_api::provider::conformance::regression_inputs(env!("CARGO_MANIFEST_DIR"), "verbs_wr");
    assert!(files.len() >= 2, "the seeds are kept");
    for (path, data) in &files {
        backend_verbs::fuzzing::peer_bytes(data);
        println!("{}: {} bytes, invariants hold", path.display(), data.len());
    }
}
