//! Back-to-back barriers with a correctness check, one process per rank.
//! Start it under a launcher or with the TCP rendezvous:
//!
//! ```sh
//! cargo build --release -p rmr-coll --features pmix --example barrier_check
//! mpirun --allow-run-as-root --oversubscribe -np 8 target/release/examples/barrier_check
//! export RMR_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
//! for r in $(seq 0 7); do RMR_RANK=$r RMR_SIZE=8 RMR_ROOT=127.0.0.1:7400 \
//!     target/release/examples/barrier_check & done; wait
//! ```
//!
//! Options (environment): `RMR_TEST_CHECK_SPEC` (IA spec, `tcp:127.0.0.1`;
//! e.g. `ofi:tcp:127.0.0.1`), `RMR_TEST_CHECK_ALGO` (`rdma` | `sendrecv`),
//! `RMR_TEST_CHECK_SHM` (`on` | `off`), `RMR_TEST_CHECK_ITERS` (1000). Every rank
//! prints `RANK r/n OK ...` and exits 0, or says what failed and exits 1.
//! All ranks must run on this machine (the check's counters are in /dev/shm).

#[path = "../tests/support/check.rs"]
mod check;

fn main() {
    match check::run_rank(&check::CheckConfig::from_env()) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("barrier_check: {e}");
            std::process::exit(1);
        }
    }
}
