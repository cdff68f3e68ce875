//! The shared-memory runtime end to end: real processes (this test binary
//! started again as job members over the TCP rendezvous), real TCP
//! endpoints. 1, 2 and 4 processes compute the same Jacobi grid bit for bit
//! as one process does; N processes incrementing a shared word under the
//! lock lose no update; a write made before taking the lock survives it;
//! fetch-and-add counts every add.

use rmr_examples::dsm::heat::{self, Grid};
use rmr_examples::dsm::{Dsm, DsmConfig};
use std::process::Command;
use std::sync::Mutex;

const ROLE: &str = "RMR_TEST_DSM_MEMBER";
static SERIAL: Mutex<()> = Mutex::new(());
const ROWS: usize = 96;
const ITERS: usize = 12;
const LOCKS: usize = 40;

/// What a member does (only when started as one; a plain run passes).
#[test]
fn member() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let g = Grid { rows: ROWS, cols: heat::COLS };
    let cfg = DsmConfig::new("tcp:127.0.0.1", g.shared_bytes() + 4 * rmr_dsm::PAGE);
    let dsm = Dsm::join(&cfg).expect("join");
    let fetched = dsm.job_stats().expect("stats")[0];
    let run = heat::run(&dsm, g, ITERS).expect("heat");
    let heat_fetched = dsm.job_stats().expect("stats")[0] - fetched;
    let word = dsm.alloc::<u64>(1).expect("alloc");
    let slots = dsm.alloc::<u64>(dsm.procs()).expect("alloc");
    // A write made before taking the lock must survive the lock (the
    // slots' page is homed elsewhere for all but one process).
    slots.set(dsm.rank(), 1000 + dsm.rank() as u64).expect("write");
    drop(dsm.lock("word").expect("lock"));
    for _ in 0..LOCKS {
        let _g = dsm.lock("word").expect("lock");
        word.set(0, word.get(0).expect("read") + 1).expect("write");
        drop(_g);
        dsm.fetch_add(1).expect("fetch_add");
    }
    dsm.barrier().expect("barrier");
    let locked = word.get(0).expect("read");
    let counted = dsm.counter().expect("counter");
    let stats = dsm.job_stats().expect("stats");
    let kept = (0..dsm.procs()).all(|r| slots.get(r).expect("read") == 1000 + r as u64);
    if dsm.rank() == 0 {
        println!(
            "RESULT kept={kept} checksum={:016x} locked={locked} counted={counted} diff_bytes={} whole={} heat_fetched={heat_fetched}",
            heat::checksum(&run.grid),
            stats[1],
            stats[3]
        );
    }
    dsm.barrier().expect("barrier");
}

fn job(n: usize) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let exe = std::env::current_exe().unwrap();
    let secret = rmr::boot::fresh_secret();
    let kids: Vec<_> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .args(["--exact", "member", "--nocapture", "--test-threads", "1"])
                .env(ROLE, "1")
                .env("RMR_RANK", r.to_string())
                .env("RMR_SIZE", n.to_string())
                .env("RMR_ROOT", format!("127.0.0.1:{port}"))
                .env("RMR_JOB_SECRET", &secret)
                .env("RMR_BOOT_TIMEOUT_S", "30")
                .output_async()
        })
        .collect();
    let mut rank0 = String::new();
    for (r, k) in kids.into_iter().enumerate() {
        let o = k.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "rank {r} of {n} failed:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        if r == 0 {
            rank0 = out;
        }
    }
    rank0
        .lines()
        .find_map(|l| l.find("RESULT").map(|i| l[i..].to_string()))
        .expect("rank 0 reports")
}

trait Spawn {
    fn output_async(&mut self) -> std::process::Child;
}

impl Spawn for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start a member")
    }
}

fn field(l: &str, k: &str) -> String {
    l.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{k}="))).unwrap_or("").to_string()
}

#[test]
fn one_two_and_four_processes_compute_the_same_grid_and_lose_no_update() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let want = format!(
        "{:016x}",
        heat::checksum(&heat::reference(Grid { rows: ROWS, cols: heat::COLS }, ITERS))
    );
    for n in [1, 2, 4] {
        let r = job(n);
        assert_eq!(field(&r, "checksum"), want, "{n} processes: grid differs from one process's");
        let total = (n * LOCKS).to_string();
        assert_eq!(field(&r, "locked"), total, "{n} processes: an update under the lock was lost");
        assert_eq!(field(&r, "counted"), total, "{n} processes: a fetch-and-add was lost");
        assert_eq!(field(&r, "kept"), "true", "{n} processes: a write made before lock() was lost");
        if n == 2 {
            // The two blocks of rows are the two blocks of pages: each
            // iteration fetches the row next to each block (one page, a
            // row being a page), and rank 0 reads the other block's rows
            // once at the end; nothing else.
            let fetched: usize = field(&r, "heat_fetched").parse().unwrap();
            let want = 2 * ITERS + ROWS / 2;
            assert_eq!(fetched, want, "2 processes: Jacobi fetched {fetched} pages, not {want}");
        }
        if n > 1 {
            // Diffs, not whole pages, went home.
            let (d, w): (u64, u64) =
                (field(&r, "diff_bytes").parse().unwrap(), field(&r, "whole").parse().unwrap());
            assert!(d > 0 && d < w, "{n} processes: diff bytes {d}, whole pages {w}");
        }
    }
}
