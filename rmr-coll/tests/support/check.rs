//! One rank of a barrier check, shared by the multi-process tests and the
//! `barrier_check` example (the program to start under `mpirun`).
//!
//! Every rank runs `iters` back-to-back barriers. Before entering barrier
//! `k` it stores `k` into its entry counter, a word of a shared-memory file
//! all ranks map (they run on this machine); after leaving barrier `k` it
//! checks that every rank's counter is `>= k` — nobody left before all
//! entered. Ranks dawdle now and then before entering (a different rank
//! each time), so a barrier that let anybody through early would be seen.

use rmr_coll::{Algo, Barrier, BarrierConfig, ShmWords};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What to check, from the environment or the command line.
#[derive(Clone, Debug)]
pub(crate) struct CheckConfig {
    /// IA spec, e.g. `tcp:127.0.0.1`, `ofi:tcp:127.0.0.1`.
    pub(crate) spec: String,
    /// Barrier algorithm.
    pub(crate) algo: Algo,
    /// Shared-memory stage on or off.
    pub(crate) shm: bool,
    /// Barriers to run.
    pub(crate) iters: u64,
}

impl CheckConfig {
    /// From `RMR_TEST_CHECK_SPEC`, `RMR_TEST_CHECK_ALGO`, `RMR_TEST_CHECK_SHM`, `RMR_TEST_CHECK_ITERS`.
    #[allow(dead_code)]
    pub(crate) fn from_env() -> CheckConfig {
        let v = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        CheckConfig {
            spec: v("RMR_TEST_CHECK_SPEC", "tcp:127.0.0.1"),
            algo: Algo::parse(&v("RMR_TEST_CHECK_ALGO", "rdma")).expect("RMR_TEST_CHECK_ALGO"),
            shm: v("RMR_TEST_CHECK_SHM", "on") == "on",
            iters: v("RMR_TEST_CHECK_ITERS", "1000").parse().expect("RMR_TEST_CHECK_ITERS"),
        }
    }
}

fn register() {
    backend_tcp::register();
    backend_ofi::register();
    multirail::register();
}

/// Runs one rank; returns its report line or what went wrong.
pub(crate) fn run_rank(cfg: &CheckConfig) -> Result<String, String> {
    register();
    let boot = rmr_boot::Bootstrap::from_env().map_err(|e| format!("bootstrap: {e}"))?;
    let (rank, size) = (boot.rank(), boot.size());
    let ia = rmr_api::open(&cfg.spec).map_err(|e| format!("open {}: {e}", cfg.spec))?;
    let bc = BarrierConfig {
        algo: cfg.algo,
        shm: cfg.shm,
        timeout: Duration::from_secs(30),
        spin: None,
    };
    let t0 = Instant::now();
    let mut barrier =
        Barrier::new(&boot, &ia, &bc).map_err(|e| format!("rank {rank}: set-up: {e}"))?;
    let setup = t0.elapsed();
    // The entry counters: one word per rank in a file every rank maps.
    let path = format!("/dev/shm/rmr-check-{}", boot.job_id());
    let made = (rank == 0).then(|| ShmWords::create(&path, size));
    boot.barrier().map_err(|e| e.to_string())?;
    let entry = match made {
        Some(m) => m,
        None => ShmWords::open(&path, size),
    }
    .map_err(|e| format!("rank {rank}: {e}"))?;
    boot.barrier().map_err(|e| e.to_string())?;
    if rank == 0 {
        let _ = entry.unlink();
    }
    let mut violations = 0u64;
    let mut first = None;
    let t1 = Instant::now();
    // RMR_TEST_CHECK_DIE_AT=r:k: rank r dies before barrier k (a failure test).
    let die_at = std::env::var("RMR_TEST_CHECK_DIE_AT").ok().and_then(|v| {
        let (r, k) = v.split_once(':')?;
        (r.parse::<usize>().ok()? == rank).then_some(k.parse::<u64>().ok()?)
    });
    for k in 1..=cfg.iters {
        if die_at == Some(k) {
            std::process::exit(3);
        }
        // Dawdle before entering: one rank in 37 barriers, a different one each time.
        if k % 37 == 0 && (k / 37) as usize % size == rank {
            std::thread::sleep(Duration::from_micros(500));
        }
        entry.word(rank).store(k, Ordering::SeqCst);
        barrier.wait().map_err(|e| format!("rank {rank}: barrier {k}: {e}"))?;
        for j in 0..size {
            if entry.word(j).load(Ordering::SeqCst) < k {
                violations += 1;
                first.get_or_insert((k, j));
            }
        }
    }
    let per = t1.elapsed().as_secs_f64() * 1e6 / cfg.iters.max(1) as f64;
    boot.barrier().map_err(|e| e.to_string())?;
    if violations > 0 {
        let (k, j) = first.expect("first violation");
        return Err(format!(
            "rank {rank}: {violations} violations; first: left barrier {k} before rank {j} entered"
        ));
    }
    Ok(format!(
        "RANK {rank}/{size} OK iters={} violations=0 algo={} shm={} members={} boot={} setup_ms={} us_per_barrier={per:.1}",
        cfg.iters,
        cfg.algo.name(),
        if cfg.shm { "on" } else { "off" },
        barrier.members(),
        boot.kind(),
        setup.as_millis(),
    ))
}
