//! `rmr-bench barrier`: the RDMA barrier against the same schedule over
//! send/recv, with N local processes joined by the TCP rendezvous.
//!
//! The command re-runs itself N times as the ranks (`RMR_BENCH_BARRIER_RANK`
//! set, `RMR_RANK`/`RMR_SIZE`/`RMR_ROOT` for the bootstrap); rank 0 times
//! every barrier and prints the medians, the parent passes its lines on.

use clap::Args;
use rmr_coll::{Algo, Barrier, BarrierConfig};
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "RMR_BENCH_BARRIER_RANK";

/// Options of `rmr-bench barrier`.
#[derive(Args, Clone, Debug)]
pub(crate) struct BarrierArgs {
    /// Number of processes (all on this machine).
    #[arg(long, default_value_t = 8)]
    procs: usize,
    /// Backend: `tcp`, `ofi:<provider>` (an IA on 127.0.0.1 each), or a
    /// whole `multirail:...` spec.
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// Shared-memory stage inside a node: on or off.
    #[arg(long, default_value = "off")]
    shm: String,
    /// Pretend this many nodes (processes are dealt round-robin; each node
    /// meets in shared memory first with --shm on).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// rdma, sendrecv or both.
    #[arg(long, default_value = "both")]
    algo: String,
    /// Timed barriers per algorithm (after a tenth as warm-up).
    #[arg(long, default_value_t = 3000)]
    iters: usize,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("rmr-bench barrier: {msg}");
    std::process::exit(2)
}

fn algos(a: &str) -> Vec<Algo> {
    match a {
        "both" => vec![Algo::Rdma, Algo::SendRecv],
        a => {
            vec![Algo::parse(a).unwrap_or_else(|| die(format!("--algo {a}: rdma, sendrecv, both")))]
        }
    }
}

fn shm_on(a: &BarrierArgs) -> bool {
    match a.shm.as_str() {
        "on" => true,
        "off" => false,
        s => die(format!("--shm {s}: on or off")),
    }
}

/// Runs the benchmark (parent) or one rank of it (child).
pub(crate) fn run(a: &BarrierArgs) {
    if std::env::var_os(CHILD).is_some() {
        rank(a);
        return;
    }
    let _ = (algos(&a.algo), shm_on(a));
    if a.procs == 0 || a.nodes == 0 {
        die("--procs and --nodes must be at least 1");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| die(e))
        .port();
    let exe = std::env::current_exe().unwrap_or_else(|e| die(e));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut kids = Vec::new();
    let secret = rmr_boot::fresh_secret();
    for r in 0..a.procs {
        let mut c = Command::new(&exe);
        c.args(&args)
            .env(CHILD, "1")
            .env("RMR_RANK", r.to_string())
            .env("RMR_SIZE", a.procs.to_string())
            .env("RMR_ROOT", format!("127.0.0.1:{port}"))
            .env("RMR_JOB_SECRET", &secret)
            .env("RMR_NODE", format!("node{}", r % a.nodes))
            .env_remove("RMR_BOOT")
            .stdout(if r == 0 { Stdio::piped() } else { Stdio::null() });
        if a.backend == "ofi:sockets" && std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none() {
            c.env("FI_SOCKETS_PE_WAITTIME", "0");
        }
        kids.push(c.spawn().unwrap_or_else(|e| die(format!("spawn rank {r}: {e}"))));
    }
    let mut failed = false;
    let mut out = String::new();
    for (r, k) in kids.into_iter().enumerate() {
        let o = k.wait_with_output().unwrap_or_else(|e| die(e));
        failed |= !o.status.success();
        if r == 0 {
            out = String::from_utf8_lossy(&o.stdout).into_owned();
        }
    }
    print!("{out}");
    if failed {
        die("a rank failed (see above)");
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn rank(a: &BarrierArgs) {
    crate::register();
    let boot = rmr_boot::Bootstrap::from_env().unwrap_or_else(|e| die(e));
    let spec = if a.backend.starts_with("multirail:") {
        a.backend.clone()
    } else {
        format!("{}:127.0.0.1", a.backend)
    };
    let ia = rmr_api::open(&spec).unwrap_or_else(|e| die(format!("{spec}: {e}")));
    let shm = shm_on(a);
    let list = algos(&a.algo);
    let mut bars: Vec<(Algo, Barrier)> = list
        .iter()
        .map(|&algo| {
            let cfg = BarrierConfig { algo, shm, timeout: Duration::from_secs(60), spin: None };
            (algo, Barrier::new(&boot, &ia, &cfg).unwrap_or_else(|e| die(e)))
        })
        .collect();
    // Alternate the algorithms in rounds so that both see the same machine.
    let rounds = 4;
    let per = a.iters.div_ceil(rounds).max(1);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); bars.len()];
    for (_, b) in &mut bars {
        for _ in 0..(a.iters / 10).max(10) {
            b.wait().unwrap_or_else(|e| die(e));
        }
    }
    for _ in 0..rounds {
        for (i, (_, b)) in bars.iter_mut().enumerate() {
            for _ in 0..per {
                let t = Instant::now();
                b.wait().unwrap_or_else(|e| die(e));
                samples[i].push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    boot.barrier().unwrap_or_else(|e| die(e));
    if boot.rank() != 0 {
        return;
    }
    let lat: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let base = list.iter().position(|&x| x == Algo::SendRecv).map(|i| lat[i]);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if !a.json {
        println!(
            "# {} procs on {} cores ({:.1}x oversubscribed), {} node(s), shm {}, backend {}, {} barriers per algorithm",
            a.procs,
            cores,
            a.procs as f64 / cores as f64,
            a.nodes,
            a.shm,
            a.backend,
            per * rounds
        );
        println!(
            "{:<9} {:<9} {:>5} {:>5} {:>5} {:>10} {:>8}",
            "test", "algo", "procs", "nodes", "shm", "lat_us", "ratio"
        );
    }
    for (i, &(algo, ref b)) in bars.iter().enumerate() {
        let ratio = base.map(|s| lat[i] / s);
        if a.json {
            let row = json!({
                "test": "barrier",
                "backend": a.backend,
                "procs": a.procs,
                "nodes": a.nodes,
                "cores": cores,
                "algo": algo.name(),
                "shm": a.shm,
                "members": b.members(),
                "rounds": b.rounds(),
                "iters": per * rounds,
                "lat_us": (lat[i] * 1000.0).round() / 1000.0,
                "ratio": ratio.map(|r| (r * 1000.0).round() / 1000.0),
            });
            println!("{row}");
        } else {
            println!(
                "{:<9} {:<9} {:>5} {:>5} {:>5} {:>10.1} {:>8}",
                "barrier",
                algo.name(),
                a.procs,
                a.nodes,
                a.shm,
                lat[i],
                ratio.map_or("-".into(), |r| format!("{r:.3}"))
            );
        }
    }
}
