//! The model client: a Cluster-OpenMP-style shared address space over rmr
//! (the `rmr-dsm` crate), running 2D Jacobi heat diffusion and a dense
//! matrix-vector product, each checked bit for bit against the same
//! computation in one process; then a lock test (no lost update), a shared
//! counter and a reduction.
//!
//! ```text
//! # 1, 2 and 4 local processes over TCP, one summary table:
//! cargo run --release -p rmr-examples --example dsm -- --sweep 1,2,4
//! # the same with page data between local processes over TCP, not shm:
//! cargo run --release -p rmr-examples --example dsm -- --sweep 1,2,4 --shm off
//! # one run of N processes (this program starts them):
//! cargo run --release -p rmr-examples --example dsm -- --procs 4
//! # under a launcher (PMIx) or by hand (RMR_RANK, RMR_SIZE, RMR_ROOT, RMR_JOB_SECRET):
//! mpirun -np 4 target/release/examples/dsm
//! RMR_DSM_SPEC='multirail:tcp:198.18.0.1,tcp:198.18.1.1' RMR_RANK=0 RMR_SIZE=2 \
//!     RMR_ROOT=198.18.0.1:7999 RMR_JOB_SECRET=<the job's> target/release/examples/dsm
//! ```

use rmr_dsm::ReduceOp;
use rmr_examples::dsm::heat::{self, Grid};
use rmr_examples::dsm::{Dsm, DsmConfig, matvec};
use std::process::{Command, Stdio};
use std::time::Instant;

struct Args {
    procs: Option<usize>,
    sweep: Vec<usize>,
    spec: String,
    rows: usize,
    iters: usize,
    locks: usize,
    n: usize,
    threads: Option<usize>,
    progress: rmr_dsm::Progress,
    shm: bool,
    bind: rmr_dsm::Bind,
}

fn usage() -> ! {
    eprintln!(
        "usage: dsm [--procs N | --sweep 1,2,4] [--spec SPEC] [--rows R] [--iters K] [--locks L]\n\
         \x20          [--n N] [--threads T] [--progress auto|on|off] [--shm on|off] [--bind auto|off]\n\
         defaults: --spec tcp:127.0.0.1 (or RMR_DSM_SPEC) --rows 256 --iters 50 --locks 200\n\
         --n 256 (the matrix-vector kernel's size), --threads: rayon's default (RAYON_NUM_THREADS)"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut a = Args {
        procs: None,
        sweep: Vec::new(),
        spec: std::env::var("RMR_DSM_SPEC").unwrap_or_else(|_| "tcp:127.0.0.1".into()),
        rows: 256,
        iters: 50,
        locks: 200,
        n: 256,
        threads: None,
        progress: rmr_dsm::Progress::Auto,
        shm: true,
        bind: rmr_dsm::Bind::Auto,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage());
        let num = |s: String| s.parse::<usize>().unwrap_or_else(|_| usage());
        match k.as_str() {
            "--procs" => a.procs = Some(num(v())),
            "--sweep" => a.sweep = v().split(',').map(|s| num(s.to_string())).collect(),
            "--spec" => a.spec = v(),
            "--rows" => a.rows = num(v()).max(3),
            "--iters" => a.iters = num(v()),
            "--locks" => a.locks = num(v()),
            "--n" => a.n = num(v()).max(1),
            "--threads" => a.threads = Some(num(v()).max(1)),
            "--progress" => {
                a.progress = match v().as_str() {
                    "auto" => rmr_dsm::Progress::Auto,
                    "on" => rmr_dsm::Progress::On,
                    "off" => rmr_dsm::Progress::Off,
                    _ => usage(),
                }
            }
            "--bind" => {
                a.bind = match v().as_str() {
                    "auto" => rmr_dsm::Bind::Auto,
                    "off" => rmr_dsm::Bind::Off,
                    _ => usage(),
                }
            }
            "--shm" => {
                a.shm = match v().as_str() {
                    "on" => true,
                    "off" => false,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    a
}

/// Starts `n` copies of this program as one job (TCP rendezvous on
/// loopback) and returns rank 0's output.
fn launch(n: usize) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(7999);
    let exe = std::env::current_exe().expect("own path");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .scan(false, |skip, a| {
            let drop = *skip || a == "--procs" || a == "--sweep";
            *skip = a == "--procs" || a == "--sweep";
            Some((!drop).then_some(a))
        })
        .flatten()
        .collect();
    let secret = rmr::boot::fresh_secret();
    let children: Vec<_> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args(&args)
                .env("RMR_RANK", r.to_string())
                .env("RMR_SIZE", n.to_string())
                .env("RMR_ROOT", format!("127.0.0.1:{port}"))
                .env("RMR_JOB_SECRET", &secret)
                .stdout(if r == 0 { Stdio::piped() } else { Stdio::null() })
                .spawn()
                .expect("start a process")
        })
        .collect();
    let mut out = String::new();
    let mut ok = true;
    for (r, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().expect("wait for a process");
        ok &= o.status.success();
        if r == 0 {
            out = String::from_utf8_lossy(&o.stdout).to_string();
        }
    }
    if !ok {
        eprintln!("dsm: a process of the {n}-process run failed");
        print!("{out}");
        std::process::exit(1);
    }
    out
}

/// One process of a job: join, compute, check, report (rank 0).
fn member(a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(t) = a.threads {
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global()?;
    }
    let g = Grid { rows: a.rows, cols: heat::COLS };
    let mut cfg = DsmConfig::new(
        a.spec.clone(),
        g.shared_bytes() + matvec::shared_bytes(a.n) + rmr_dsm::PAGE,
    );
    cfg.progress = a.progress;
    cfg.shm = a.shm;
    cfg.bind = a.bind;
    let t0 = Instant::now();
    let dsm = Dsm::join(&cfg)?;
    let joined = t0.elapsed();
    let run = heat::run(&dsm, g, a.iters)?;
    let mv = matvec::run(&dsm, a.n, a.iters)?;

    // The lock: every process adds 1 to a shared word L times under it.
    let word = dsm.alloc::<u64>(1)?;
    for _ in 0..a.locks {
        let _g = dsm.lock("word")?;
        word.set(0, word.get(0)? + 1)?;
    }
    // The counter: fetch-and-add, L times each.
    for _ in 0..a.locks {
        dsm.fetch_add(1)?;
    }
    dsm.barrier()?;
    let locked = word.get(0)?;
    let counted = dsm.counter()?;
    let ranks = dsm.reduce(ReduceOp::Sum, dsm.rank() as i64)?;
    let [fetched, diff_bytes, diff_runs, whole, _barriers, _locks, retries] = dsm.job_stats()?;

    if dsm.rank() == 0 {
        let want = heat::reference(g, a.iters);
        let same = run.grid.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
        let mv_want = matvec::reference(a.n, a.iters);
        let mv_same = mv.x.iter().zip(&mv_want).all(|(x, y)| x.to_bits() == y.to_bits());
        let expect = (a.locks * dsm.procs()) as u64;
        let n = dsm.procs() as i64;
        println!(
            "procs={} spec={} launcher=\"{}\" rows={} cols={} iters={} us_per_iter={:.1} join_ms={} \
             checksum={:016x} reference={:016x} bit_identical={} matvec_n={} matvec_us={:.1} \
             matvec_identical={} pages_fetched={} diff_bytes={} diff_runs={} whole_page_bytes={} \
             lock_total={} lock_expected={} counter_total={} lock_retries={} reduce_ok={} \
             rank0_binding=\"{}\"",
            dsm.procs(),
            dsm.ia_attr().provider,
            dsm.launcher(),
            g.rows,
            g.cols,
            run.iters,
            run.per_iter.as_secs_f64() * 1e6,
            joined.as_millis(),
            heat::checksum(&run.grid),
            heat::checksum(&want),
            same,
            a.n,
            mv.per_iter.as_secs_f64() * 1e6,
            mv_same,
            fetched,
            diff_bytes,
            diff_runs,
            whole,
            locked,
            expect,
            counted,
            retries,
            ranks == n * (n - 1) / 2,
            dsm.binding(),
        );
        if !same || !mv_same || locked != expect || counted != expect || ranks != n * (n - 1) / 2 {
            return Err("result check failed".into());
        }
    }
    Ok(())
}

fn field<'a>(line: &'a str, k: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
        .unwrap_or("-")
}

fn main() {
    rmr_examples::init_tracing();
    let a = parse();
    if std::env::var_os("RMR_RANK").is_some() || std::env::var_os("PMIX_RANK").is_some() {
        if let Err(e) = member(&a) {
            eprintln!("dsm: {e}");
            std::process::exit(1);
        }
        return;
    }
    let sweep = if !a.sweep.is_empty() { a.sweep.clone() } else { vec![a.procs.unwrap_or(2)] };
    println!(
        "Jacobi heat diffusion, {} x {} doubles, and x <- Ax/n on a {} x {} matrix, {} iterations each, in rmr shared memory ({})",
        a.rows,
        heat::COLS,
        a.n,
        a.n,
        a.iters,
        a.spec
    );
    println!(
        "{:>5} {:>12} {:>14} {:>12} {:>10} {:>10} {:>12} {:>14} {:>10} {:>8}",
        "procs",
        "us/iter",
        "bit-identical",
        "matvec us",
        "identical",
        "fetched",
        "diff bytes",
        "whole pages",
        "lock ok",
        "counter"
    );
    let mut placed = Vec::new();
    for n in sweep {
        let out = launch(n);
        let l = out.lines().find(|l| l.starts_with("procs=")).unwrap_or("");
        let binding = l.split("rank0_binding=\"").nth(1).and_then(|r| r.split('"').next());
        placed.push(format!("{n} procs: {}", binding.unwrap_or("-")));
        println!(
            "{:>5} {:>12} {:>14} {:>12} {:>10} {:>10} {:>12} {:>14} {:>10} {:>8}",
            n,
            field(l, "us_per_iter"),
            field(l, "bit_identical"),
            field(l, "matvec_us"),
            field(l, "matvec_identical"),
            field(l, "pages_fetched"),
            field(l, "diff_bytes"),
            field(l, "whole_page_bytes"),
            (field(l, "lock_total") == field(l, "lock_expected")).to_string(),
            field(l, "counter_total"),
        );
    }
    println!(
        "(diff bytes: what release consistency sent home; whole pages: what sending every dirty page would have cost)"
    );
    println!("(rank 0's placement, --bind: {})", placed.join("; "));
}
