//! Replays every input kept in `fuzz-regressions/mr_psp/` through the same
//! rig as the `mr_psp` fuzz target: a real multirail PSP over two loopback
//! TCP rails, spoken to by a raw peer.

#[path = "support/mr_rig.rs"]
mod mr_rig;

#[test]
fn replay_mr_psp() {
    let files =
        rmr_api::provider::conformance::regression_inputs(env!("CARGO_MANIFEST_DIR"), "mr_psp");
    assert!(!files.is_empty());
    let rig = mr_rig::MrRig::new();
    for (p, data) in files {
        let (rail, pd) = mr_rig::build(&data);
        let a = rig.feed(rail, &pd);
        println!("{}: {a:?}", p.display());
    }
}
