//! Replays every input kept in `fuzz-regressions/` (seeds that reach each
//! decoder, and any crash cargo-fuzz finds, once fixed) through the same
//! entry points the fuzz targets use. A plain `cargo test` runs them.

use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    rmr_api::provider::conformance::regression_inputs(env!("CARGO_MANIFEST_DIR"), target)
}

#[test]
fn replay_zb_ctrl() {
    let files = inputs("zb_ctrl");
    assert!(files.len() >= 8, "zb_ctrl seeds missing");
    for (path, data) in &files {
        println!("{}", path.display());
        zipper_bridge::fuzzing::control_bytes(data);
    }
    // The seeds reach every decoder: a valid header and each hello decode.
    let get = |n: &str| &files.iter().find(|(p, _)| p.ends_with(n)).expect(n).1;
    assert!(zipper_bridge::wire::Header::decode(get("hdr_ctl_credits")).is_some());
    assert!(zipper_bridge::wire::Header::decode(get("hdr_bad_kind")).is_none());
    assert!(zipper_bridge::wire::Header::decode(get("hdr_short")).is_none());
}

#[test]
fn replay_world_file() {
    let files = inputs("world_file");
    let mut accepted = 0;
    for (path, data) in &files {
        let ok = zipper_bridge::fuzzing::world_text(data);
        println!("{}: {}", path.display(), if ok { "accepted" } else { "refused" });
        let name = path.file_name().unwrap().to_string_lossy();
        if name == "good.toml" {
            assert!(ok, "the good world was refused");
        } else if name.ends_with(".toml") {
            // The curated bad worlds (crash inputs the fuzzer keeps have
            // other names and only must not panic).
            assert!(!ok, "{name} was accepted");
        }
        accepted += usize::from(ok);
    }
    assert!(accepted >= 1);
}
