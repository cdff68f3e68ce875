//! The short soak CI runs: both transports at once for `RMR_TEST_SOAK_SECS`
//! (default 20 s) with 8 EPs x 16 rounds in flight each; every byte
//! checked, nothing lost, memory flat after the warm-up.

use rmr_examples::soak::{SoakConfig, run};

#[test]
fn soak_short_tcp_and_multirail() {
    let secs =
        std::env::var("RMR_TEST_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(20.0);
    let cfg = SoakConfig { secs, ..SoakConfig::default() };
    let r = run(&cfg).expect("soak");
    for t in &r.reports {
        println!("{t:?}");
        assert_eq!(t.mismatches, 0, "{}: corrupted data", t.transport);
        assert_eq!(t.read_mismatches, 0, "{}: corrupted read-back", t.transport);
        assert_eq!(t.errors, 0, "{}: failed DTOs", t.transport);
        assert_eq!(t.rounds_done, t.rounds_started, "{}: rounds lost", t.transport);
        assert!(t.rounds_done > 1000, "{}: only {} rounds", t.transport, t.rounds_done);
    }
    let growth = r.rss_end.saturating_sub(r.rss_start);
    println!(
        "RSS start {} KiB, end {} KiB, max {} KiB",
        r.rss_start >> 10,
        r.rss_end >> 10,
        r.rss_max >> 10
    );
    assert!(growth < 32 << 20, "RSS grew by {growth} bytes after the warm-up");
}
