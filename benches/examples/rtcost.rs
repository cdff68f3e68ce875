//! The small-message round trip of the lab's latency test (each side posts
//! a receive, a suppressed 8-byte RDMA write and a suppressed 8-byte send,
//! then waits for the other side's send), `N` times between two endpoints
//! of one spec in this process, over real loopback TCP sockets.
//!
//! It is the workload `scripts/rt-instructions.sh` runs under callgrind:
//! the instructions one round trip costs (both ends) on a plain `tcp`
//! endpoint and on multirail endpoints, counted rather than timed, so the
//! multirail layer's own cost per small message can be compared on a
//! noisy host. Run alone it prints the mean round trip and the median time
//! of each post.
//!
//! `cargo run --release -p rmr-bench --example rtcost -- SPEC [N]`
//! (SPEC as in rmr's endpoint specs: `tcp:127.0.0.1`,
//! `multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned`, `shm:rtcost`,
//! `ofi:tcp:127.0.0.1`).

use rmr_api::provider::conformance::{Pair, Target, write_send_ping_pong};

fn register() {
    backend_tcp::register();
    backend_shm::register();
    backend_ofi::register();
    multirail::register();
}

/// Median of the `k`th post time, in nanoseconds.
fn median(took: &[[std::time::Duration; 3]], k: usize) -> u128 {
    let mut v: Vec<u128> = took.iter().map(|t| t[k].as_nanos()).collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(spec) = args.next() else {
        eprintln!("usage: rtcost SPEC [ROUND_TRIPS]");
        std::process::exit(2);
    };
    let n: u64 = args.next().map_or(2000, |s| s.parse().expect("ROUND_TRIPS: a number"));
    let t = Target::new("rtcost", register, &spec, &spec);
    let p = Pair::new(&t);
    let t0 = std::time::Instant::now();
    let took = write_send_ping_pong(&p, n);
    let rt = t0.elapsed().as_nanos() / u128::from(n.max(1));
    println!(
        "{spec}: {n} round trips, {rt} ns each on average; median post times: receive {} ns, write {} ns, send {} ns",
        median(&took, 0),
        median(&took, 1),
        median(&took, 2)
    );
}
