//! The barrier across real processes: this test binary starts N copies of
//! itself (role `barrier_rank`), joined by the TCP rendezvous or by
//! `mpirun` (PMIx). Every rank runs back-to-back barriers and checks with
//! shared-memory entry counters that nobody left a barrier before all had
//! entered (see `support/check.rs`).

#[path = "support/check.rs"]
mod check;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ROLE: &str = "RMR_TEST_COLL_ROLE";
/// The jobs share two cores: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// One rank (started by the tests below, never on its own).
#[test]
#[ignore = "worker, not a test: one rank that the multi-process tests below start (RMR_TEST_COLL_ROLE)"]
fn barrier_rank() {
    assert!(std::env::var(ROLE).is_ok(), "started by the multi-process tests");
    match check::run_rank(&check::CheckConfig::from_env()) {
        Ok(line) => println!("{line}"),
        Err(e) => panic!("{e}"),
    }
}

#[derive(Clone)]
struct Job {
    n: usize,
    spec: &'static str,
    algo: &'static str,
    shm: bool,
    iters: u64,
    /// Pretend this many nodes (`RMR_NODE` = rank % nodes).
    nodes: Option<usize>,
    /// The job's secret (every rank's `RMR_JOB_SECRET`).
    secret: String,
}

impl Job {
    fn new(n: usize, spec: &'static str, algo: &'static str, shm: bool, iters: u64) -> Job {
        Job { n, spec, algo, shm, iters, nodes: None, secret: rmr_boot::fresh_secret() }
    }
    fn env(&self, c: &mut Command) {
        c.env(ROLE, "rank")
            .env("RMR_TEST_CHECK_SPEC", self.spec)
            .env("RMR_TEST_CHECK_ALGO", self.algo)
            .env("RMR_TEST_CHECK_SHM", if self.shm { "on" } else { "off" })
            .env("RMR_TEST_CHECK_ITERS", self.iters.to_string())
            .env("RMR_BOOT_TIMEOUT_S", "20")
            .env("RMR_JOB_SECRET", &self.secret)
            .env("FI_SOCKETS_PE_WAITTIME", "0");
    }
    fn name(&self) -> String {
        format!(
            "{} procs on {} ({}, shm {}{})",
            self.n,
            self.spec,
            self.algo,
            if self.shm { "on" } else { "off" },
            self.nodes.map_or(String::new(), |k| format!(", {k} nodes"))
        )
    }
}

fn rank_cmd() -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["barrier_rank", "--exact", "--ignored", "--nocapture", "--test-threads", "1"]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Waits for every child (killing them all after `limit`); returns
/// (success, stdout, stderr) of each.
fn collect(children: Vec<Child>, limit: Duration) -> Vec<(bool, String, String)> {
    let deadline = Instant::now() + limit;
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    loop {
        let running = children.iter_mut().flatten().any(|c| c.try_wait().ok().flatten().is_none());
        if !running {
            break;
        }
        if Instant::now() >= deadline {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .iter_mut()
        .map(|c| {
            let out = c.take().expect("child").wait_with_output().expect("output");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts the job's ranks with the TCP rendezvous, `skip` ranks left out.
fn spawn_rendezvous(job: &Job, skip: &[usize]) -> Vec<Child> {
    let root = format!("127.0.0.1:{}", free_port());
    (0..job.n)
        .filter(|r| !skip.contains(r))
        .map(|r| {
            let mut c = rank_cmd();
            job.env(&mut c);
            c.env("RMR_RANK", r.to_string())
                .env("RMR_SIZE", job.n.to_string())
                .env("RMR_ROOT", &root);
            if let Some(k) = job.nodes {
                c.env("RMR_NODE", format!("node{}", r % k));
            }
            c.spawn().expect("spawn rank")
        })
        .collect()
}

/// Checks that every rank of `job` reported success; returns the slowest rank's line.
fn assert_ok(job: &Job, res: &[(bool, String, String)]) -> String {
    for (r, (ok, out, err)) in res.iter().enumerate() {
        assert!(ok, "{}: rank {r} failed:\n{out}\n{err}", job.name());
        assert!(
            out.contains(&format!("/{} OK iters={} violations=0", job.n, job.iters)),
            "{}: rank {r} did not report:\n{out}",
            job.name()
        );
    }
    res.iter()
        .filter_map(|(_, o, _)| o.lines().find(|l| l.starts_with("RANK ")).map(str::to_string))
        .next_back()
        .unwrap_or_default()
}

fn run_rendezvous(job: &Job) {
    let t = Instant::now();
    let res = collect(spawn_rendezvous(job, &[]), Duration::from_secs(90));
    let line = assert_ok(job, &res);
    println!("{}: {:.2} s; {}", job.name(), t.elapsed().as_secs_f64(), line);
}

fn ofi_provider_works(provider: &str) -> bool {
    backend_ofi::register();
    match rmr_api::open(&format!("ofi:{provider}:127.0.0.1")) {
        Ok(_) => true,
        Err(e) => {
            println!("SKIPPED: libfabric provider `{provider}` unavailable: {e}");
            false
        }
    }
}

#[test]
fn rdma_barrier_over_tcp_for_1_to_17_processes() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for n in 1..=17 {
        let iters = if matches!(n, 8 | 16 | 17) { 1000 } else { 300 };
        run_rendezvous(&Job::new(n, "tcp:127.0.0.1", "rdma", false, iters));
    }
}

#[test]
fn sendrecv_barrier_over_tcp() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for n in [1, 2, 3, 6, 8, 13] {
        run_rendezvous(&Job::new(n, "tcp:127.0.0.1", "sendrecv", false, 500));
    }
}

#[test]
fn shared_memory_tree_with_one_and_several_nodes() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    run_rendezvous(&Job::new(8, "tcp:127.0.0.1", "rdma", true, 1000));
    for (n, k, algo) in [(17, 3, "rdma"), (11, 5, "sendrecv"), (6, 6, "rdma")] {
        let job = Job { nodes: Some(k), ..Job::new(n, "tcp:127.0.0.1", algo, true, 1000) };
        run_rendezvous(&job);
    }
}

#[test]
fn barrier_over_libfabric_tcp_and_sockets() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for (provider, spec) in [("tcp", "ofi:tcp:127.0.0.1"), ("sockets", "ofi:sockets:127.0.0.1")] {
        if !ofi_provider_works(provider) {
            continue;
        }
        for (n, algo) in [(5, "rdma"), (8, "rdma"), (5, "sendrecv")] {
            run_rendezvous(&Job::new(n, spec, algo, false, 300));
        }
    }
}

#[test]
fn barrier_over_multirail_endpoints() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let spec = "multirail:tcp:127.0.0.1,tcp:127.0.0.2";
    run_rendezvous(&Job::new(4, spec, "rdma", false, 300));
    run_rendezvous(&Job::new(3, spec, "sendrecv", false, 300));
}

#[test]
fn a_rank_that_never_comes_is_a_typed_error() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let job = Job::new(3, "tcp:127.0.0.1", "rdma", false, 10);
    let t = Instant::now();
    let mut cs = Vec::new();
    let root = format!("127.0.0.1:{}", free_port());
    for r in 0..2 {
        let mut c = rank_cmd();
        job.env(&mut c);
        c.env("RMR_RANK", r.to_string())
            .env("RMR_SIZE", "3")
            .env("RMR_ROOT", &root)
            .env("RMR_BOOT_TIMEOUT_S", "1");
        cs.push(c.spawn().unwrap());
    }
    let res = collect(cs, Duration::from_secs(30));
    assert!(t.elapsed() < Duration::from_secs(25), "took {:?}", t.elapsed());
    let (ok0, out0, err0) = &res[0];
    assert!(!ok0);
    assert!(
        out0.contains("ranks [2] of 3 never showed up")
            || err0.contains("ranks [2] of 3 never showed up"),
        "root:\n{out0}\n{err0}"
    );
    let (ok1, out1, err1) = &res[1];
    assert!(!ok1);
    assert!(
        out1.contains("aborted by the root") || err1.contains("aborted by the root"),
        "{out1}\n{err1}"
    );
}

#[test]
fn a_rank_that_dies_mid_job_fails_the_others_quickly() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let job = Job::new(4, "tcp:127.0.0.1", "rdma", false, 400);
    let root = format!("127.0.0.1:{}", free_port());
    let t = Instant::now();
    let cs: Vec<Child> = (0..4)
        .map(|r| {
            let mut c = rank_cmd();
            job.env(&mut c);
            c.env("RMR_RANK", r.to_string())
                .env("RMR_SIZE", "4")
                .env("RMR_ROOT", &root)
                .env("RMR_TEST_CHECK_DIE_AT", "2:100");
            c.spawn().unwrap()
        })
        .collect();
    let res = collect(cs, Duration::from_secs(60));
    assert!(res.iter().all(|(ok, _, _)| !ok), "every rank must fail");
    let all: String = res.iter().map(|(_, o, e)| format!("{o}{e}")).collect();
    // Rank 2 dies entering barrier 100; a partner may still be finishing
    // barrier 99's last write to it, so the error surfaces in 99 or 100.
    assert!(
        (all.contains("barrier 100") || all.contains("barrier 99")) && all.contains("link to rank"),
        "{all}"
    );
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?}", t.elapsed());
}

fn mpirun() -> Option<Command> {
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("SKIPPED: mpirun not installed (scripts/setup.sh installs openmpi-bin)");
        return None;
    }
    let mut c = Command::new("mpirun");
    // Root in a container needs --allow-run-as-root; more ranks than cores
    // need --oversubscribe. Nothing else is needed with Debian's Open MPI 4.1.
    c.args(["--allow-run-as-root", "--oversubscribe"]);
    Some(c)
}

#[test]
fn barrier_under_mpirun_with_pmix() {
    if !rmr_boot::PMIX_BUILT {
        println!("SKIPPED: built without the `pmix` feature (scripts/test.sh enables it)");
        return;
    }
    let Some(_) = mpirun() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for job in [
        Job::new(8, "tcp:127.0.0.1", "rdma", false, 1000),
        Job::new(8, "tcp:127.0.0.1", "rdma", true, 1000),
        Job::new(5, "tcp:127.0.0.1", "sendrecv", false, 500),
    ] {
        let t = Instant::now();
        let mut c = mpirun().expect("mpirun");
        c.args(["-np", &job.n.to_string()]);
        for k in [
            ROLE,
            "RMR_TEST_CHECK_SPEC",
            "RMR_TEST_CHECK_ALGO",
            "RMR_TEST_CHECK_SHM",
            "RMR_TEST_CHECK_ITERS",
        ] {
            c.args(["-x", k]);
        }
        job.env(&mut c);
        c.arg(std::env::current_exe().unwrap());
        c.args(["barrier_rank", "--exact", "--ignored", "--nocapture", "--test-threads", "1"]);
        let out = c.output().expect("mpirun");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}:\n{text}\n{}",
            job.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        for r in 0..job.n {
            assert!(text.contains(&format!("RANK {r}/{} OK", job.n)), "rank {r}:\n{text}");
        }
        assert!(text.contains("boot=pmix"), "{text}");
        println!("mpirun {}: {:.2} s", job.name(), t.elapsed().as_secs_f64());
    }
}
