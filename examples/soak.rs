//! The soak: many EPs and many outstanding DTOs over `tcp` and `multirail`
//! (two loopback rails) for a bounded time, every byte checksummed, RSS
//! reported at the start (after warm-up) and end. Exits non-zero on any
//! mismatch, error, lost round or growth of memory.
//!
//! ```text
//! cargo run --release -p rmr-examples --example soak -- [SECS] [EPS] [WINDOW] [TRANSPORTS]
//! cargo run --release -p rmr-examples --example soak -- 300 16 32 tcp,multirail
//! ```
//! Defaults: 60 s, 8 EPs, 16 rounds in flight per EP, both transports.
//! `RMR_TEST_SOAK_MAX_GROWTH_MB` (32): allowed RSS growth after the warm-up.

use rmr_examples::soak::{SoakConfig, run};

fn main() {
    rmr_examples::init_tracing();
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut cfg = SoakConfig::default();
    if let Some(v) = a.first() {
        cfg.secs = v.parse().expect("SECS");
    }
    if let Some(v) = a.get(1) {
        cfg.eps = v.parse().expect("EPS");
    }
    if let Some(v) = a.get(2) {
        cfg.window = v.parse().expect("WINDOW");
    }
    if let Some(v) = a.get(3) {
        cfg.transports = v.split(',').map(str::to_string).collect();
    }
    let max_growth: u64 = std::env::var("RMR_TEST_SOAK_MAX_GROWTH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    println!("soak: {cfg:?}");
    let r = match run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("soak FAILED: {e}");
            std::process::exit(1);
        }
    };
    let mut bad = false;
    for t in &r.reports {
        println!(
            "{:>9}: rounds {} started / {} done, {} DTOs, {:.1} MiB verified, mismatches {} after write+send, {} after read, {} errors",
            t.transport,
            t.rounds_started,
            t.rounds_done,
            t.dtos,
            t.bytes_verified as f64 / (1 << 20) as f64,
            t.mismatches,
            t.read_mismatches,
            t.errors
        );
        bad |= t.mismatches > 0
            || t.read_mismatches > 0
            || t.errors > 0
            || t.rounds_done != t.rounds_started;
    }
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "RSS start {:.1} MiB (after warm-up), end {:.1} MiB, max {:.1} MiB, after teardown {:.1} MiB; {:.1} s",
        mb(r.rss_start),
        mb(r.rss_end),
        mb(r.rss_max),
        mb(r.rss_after),
        r.secs
    );
    if r.rss_end.saturating_sub(r.rss_start) > max_growth << 20 {
        println!("memory grew by more than {max_growth} MiB");
        bad = true;
    }
    if bad {
        std::process::exit(1);
    }
    println!("soak: ok");
}
