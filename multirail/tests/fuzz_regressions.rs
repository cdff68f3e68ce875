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

/// A rejoin request and a control-rail notice of the right length for a
/// session nobody has are refused alike, and reach nobody.
#[test]
fn a_rejoin_or_notice_for_no_session_is_refused() {
    let rig = mr_rig::MrRig::new();
    for (mode, what) in [(4u8, "rejoin"), (4 | 8 | 1, "notice")] {
        // Session, rail (the one it arrives on), rail count, attempt, MAC.
        let mut input = vec![mode];
        input.extend_from_slice(&[0x42; 8]);
        input.extend_from_slice(&[mode & 1, 2]);
        input.extend_from_slice(&[0x42; 20]);
        let (rail, pd) = mr_rig::build(&input);
        assert_eq!(pd.len(), 34, "{what}: the length of a real request");
        let a = rig.feed(rail, &pd);
        assert_eq!(a, mr_rig::Answer::Rejected(b"rejoin refused".to_vec()), "{what}");
    }
}
