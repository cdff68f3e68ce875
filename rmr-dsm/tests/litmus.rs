//! Memory-model litmus tests for the runtime, in the style of the
//! litmus suites for hardware memory models: each runs many rounds on 2
//! and 4 real processes (this test binary started again as job members
//! over the TCP rendezvous), over the tcp backend and over 2-rail
//! multirail EPs on loopback, and asserts that only the outcomes release
//! consistency allows are ever seen.
//!
//! - message passing under a lock: a reader that sees the flag sees the
//!   data written before it;
//! - message passing across a barrier;
//! - a page prefetched before a barrier is not read stale after it;
//! - store buffering across a barrier: every process sees every store;
//! - a lock-protected counter: no update lost;
//! - write, then lock: writes made before taking a lock survive it and
//!   reach another process;
//! - nested locks (two names sharing a lock word): one thread takes them
//!   inside each other, no hang and no update lost; one name taken again
//!   by its holder is a typed error;
//! - threads of one process: one writes and takes a lock while another
//!   reads the same page; no write is lost;
//! - false sharing: processes writing disjoint words of one page (homed
//!   at a third process where there is one) all land;
//! - many pages written by every process at once;
//! - reductions: every process gets the same, right value;
//! - a panic while holding a guard leaves the lock free;
//! - bad input (no room, an index or address outside) gets a typed error
//!   and changes nothing;
//! - placement: the processes of a node are bound to cores of their own
//!   where there are enough (`Bind::Auto`).

use rmr_dsm::{Dsm, DsmConfig, DsmError, Progress, ReduceOp};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ROLE: &str = "RMR_TEST_DSM_LITMUS_MEMBER";
const SPEC: &str = "RMR_TEST_DSM_LITMUS_SPEC";
const HELPER: &str = "RMR_TEST_DSM_LITMUS_PROGRESS_THREAD";
/// `noshm`: page data between processes of a node over the network too;
/// `nodes`: ranks pretend to be on nodes of two (`RMR_NODE`), so page data
/// goes over shm inside a pair and over the network between pairs.
const MODE: &str = "RMR_TEST_DSM_LITMUS_MODE";
static SERIAL: Mutex<()> = Mutex::new(());
const ROUNDS: u64 = 40;

fn litmus(dsm: &Dsm) -> Vec<&'static str> {
    let (me, n) = (dsm.rank(), dsm.procs());
    let mut passed = Vec::new();

    // Bad input gets a typed error and changes nothing.
    let left = dsm.available();
    assert!(matches!(dsm.alloc::<u64>(usize::MAX / 4), Err(DsmError::OutOfSpace { .. })));
    assert!(matches!(dsm.alloc::<u8>(left + 1), Err(DsmError::OutOfSpace { .. })));
    assert_eq!(dsm.available(), left, "a refused allocation took no room");
    let small = dsm.alloc::<u64>(4).expect("alloc");
    small.set(0, 7).expect("set");
    let oob = |r: rmr_dsm::Result<()>| matches!(r, Err(DsmError::OutOfBounds { .. }));
    assert!(matches!(small.get(4), Err(DsmError::OutOfBounds { start: 4, len: 1, elements: 4 })));
    assert!(oob(small.set(5, 1)));
    assert!(oob(small.read(2, &mut [0; 3])));
    assert!(oob(small.write(usize::MAX, &[1])));
    let end = dsm.len();
    let range = |r: rmr_dsm::Result<()>| matches!(r, Err(DsmError::OutOfRange { .. }));
    assert!(range(dsm.read(end - 4, &mut [0u8; 8])));
    assert!(range(dsm.write(usize::MAX - 2, &[0u8; 8])));
    assert!(range(dsm.prefetch(end, 1)));
    assert_eq!(small.to_vec(0..4).expect("read"), [7, 0, 0, 0], "refused accesses changed nothing");
    dsm.barrier().expect("barrier");
    passed.push("bad_input");

    // Message passing under a lock. P0 writes data = k outside the lock,
    // then flag = k under it; the others read flag and data under the
    // lock: data >= flag always (never a flag without its data).
    let data = dsm.alloc::<u64>(1).expect("alloc");
    let flag = dsm.alloc::<u64>(1).expect("alloc");
    if me == 0 {
        for k in 1..=ROUNDS {
            data.set(0, k).expect("data");
            let _g = dsm.lock("mp").expect("lock");
            flag.set(0, k).expect("flag");
        }
    } else {
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen < ROUNDS {
            let g = dsm.lock("mp").expect("lock");
            let f = flag.get(0).expect("flag");
            let d = data.get(0).expect("data");
            g.unlock().expect("unlock");
            assert!(d >= f, "message passing: rank {me} saw flag {f} but data {d}");
            assert!(f >= seen, "message passing: flag went back from {seen} to {f}");
            seen = f;
            assert!(Instant::now() < deadline, "message passing: flag stuck at {seen}");
        }
    }
    dsm.barrier().expect("barrier");
    passed.push("message_passing_lock");

    // Message passing across a barrier.
    let (d2, f2) = (dsm.alloc::<u64>(1).expect("alloc"), dsm.alloc::<u64>(1).expect("alloc"));
    for k in 1..=ROUNDS {
        if me == n - 1 {
            d2.set(0, 7 * k).expect("data");
            f2.set(0, k).expect("flag");
        }
        dsm.barrier().expect("barrier");
        let (f, d) = (f2.get(0).expect("flag"), d2.get(0).expect("data"));
        assert_eq!((f, d), (k, 7 * k), "message passing across a barrier, round {k}");
        dsm.barrier().expect("barrier");
    }
    passed.push("message_passing_barrier");

    // A prefetch is not a read past an acquire: a copy prefetched before a
    // barrier (possibly stale) is dropped by it; the read after sees the
    // value written before the barrier.
    let pf = dsm.alloc::<u64>(512 * n).expect("alloc");
    for k in 1..=ROUNDS {
        // Word 512 * r lives on page r of the array, homed at rank r.
        let other = 512 * ((me + 1) % n);
        pf.prefetch(other..other + 1).expect("prefetch");
        pf.set(512 * me, k).expect("write at home");
        dsm.barrier().expect("barrier");
        assert_eq!(pf.get(other).expect("read"), k, "prefetch before a barrier, round {k}");
        dsm.barrier().expect("barrier");
    }
    passed.push("prefetch_then_barrier");

    // Store buffering: each writes its own word, barrier, reads all; the
    // outcome where someone misses a store is forbidden. (A process already
    // in the next round may have stored k + 1: seeing a later store early
    // is allowed, an earlier value never.)
    let x = dsm.alloc::<u64>(n).expect("alloc");
    for k in 1..=ROUNDS {
        x.set(me, k).expect("store");
        dsm.barrier().expect("barrier");
        let all = x.to_vec(0..n).expect("load");
        assert!(
            all.iter().all(|&v| v == k || v == k + 1),
            "store buffering, round {k}: rank {me} saw {all:?}"
        );
    }
    passed.push("store_buffering");

    // A lock-protected counter.
    let counter = dsm.alloc::<u64>(1).expect("alloc");
    for _ in 0..ROUNDS {
        let _g = dsm.lock("counter").expect("lock");
        counter.set(0, counter.get(0).expect("get") + 1).expect("set");
    }
    dsm.barrier().expect("barrier");
    assert_eq!(counter.get(0).expect("get"), ROUNDS * n as u64, "lock-protected counter");
    passed.push("lock_counter");

    // Write, then lock: a write made before taking a lock is not lost by
    // the acquire, and another process that takes the same lock later sees it.
    let slots = dsm.alloc::<u64>(n).expect("alloc");
    let turn = dsm.alloc::<u64>(1).expect("alloc");
    slots.set(me, 1000 + me as u64).expect("write");
    drop(dsm.lock("wtl").expect("lock"));
    {
        // Take turns in rank order: each checks the writes of all before it.
        loop {
            let g = dsm.lock("wtl").expect("lock");
            if turn.get(0).expect("turn") == me as u64 {
                for r in 0..=me {
                    let v = slots.get(r).expect("read");
                    assert_eq!(
                        v,
                        1000 + r as u64,
                        "write then lock: rank {me} lost rank {r}'s write"
                    );
                }
                turn.set(0, me as u64 + 1).expect("turn");
                g.unlock().expect("unlock");
                break;
            }
            g.unlock().expect("unlock");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    dsm.barrier().expect("barrier");
    assert!((0..n).all(|r| slots.get(r).expect("read") == 1000 + r as u64), "write then lock");
    passed.push("write_then_lock");

    // Two names that share a lock word ("lock194" shares `critical`'s):
    // one thread takes them inside each other without hanging, and no other
    // process gets in meanwhile. The same name again is a typed error.
    let nested = dsm.alloc::<u64>(1).expect("alloc");
    for _ in 0..ROUNDS {
        dsm.critical(|| {
            let _g = dsm.lock("lock194")?;
            assert!(
                matches!(dsm.lock("lock194"), Err(DsmError::AlreadyHeld(n)) if n == "lock194"),
                "a lock taken again by its holder"
            );
            nested.set(0, nested.get(0)? + 1)
        })
        .expect("nested locks");
    }
    dsm.barrier().expect("barrier");
    assert_eq!(nested.get(0).expect("get"), ROUNDS * n as u64, "nested locks");
    passed.push("nested_locks");

    // Threads of one process: one writes a word of a page homed elsewhere
    // and takes a lock after each write (an acquire: the write goes home,
    // the copies are dropped) while another keeps reading another word of
    // that page (fetching it again after each drop). No write is lost.
    let mt = dsm.alloc::<u64>(512 * n).expect("alloc");
    let page = 512 * ((me + 1) % n);
    std::thread::scope(|s| {
        s.spawn(|| {
            for k in 1..=ROUNDS {
                mt.set(page + 1 + me, k).expect("write");
                drop(dsm.lock("mt").expect("lock"));
            }
        });
        s.spawn(|| {
            for _ in 0..4 * ROUNDS {
                assert_eq!(mt.get(page).expect("read"), 0, "a word nobody writes");
            }
        });
    });
    dsm.barrier().expect("barrier");
    for r in 0..n {
        let got = mt.get(512 * ((r + 1) % n) + 1 + r).expect("read");
        assert_eq!(got, ROUNDS, "threads: rank {r}'s last write, read by rank {me}");
    }
    passed.push("threads_lock_while_reading");

    // False sharing: every process writes its own word of one page, homed
    // at the last process (a third party when there are more than two).
    let page = dsm.alloc::<u64>(512).expect("alloc");
    for k in 1..=ROUNDS {
        page.set(me, k * 100 + me as u64).expect("write");
        dsm.barrier().expect("barrier");
        for r in 0..n {
            assert_eq!(page.get(r).expect("read"), k * 100 + r as u64, "false sharing, round {k}");
        }
        dsm.barrier().expect("barrier");
    }
    passed.push("false_sharing");

    // Many pages, every one written by every process (interleaved words).
    let many = dsm.alloc::<u64>(64 * 512).expect("alloc");
    for k in 1..=3u64 {
        let mine: Vec<usize> = (me..many.len()).step_by(n).collect();
        for &i in &mine {
            many.set(i, k << 32 | i as u64).expect("write");
        }
        dsm.barrier().expect("barrier");
        let all = many.to_vec(0..many.len()).expect("read");
        for (i, v) in all.iter().enumerate() {
            assert_eq!(*v, k << 32 | i as u64, "many pages, round {k}, word {i}");
        }
        dsm.barrier().expect("barrier");
    }
    passed.push("many_pages");

    // Reductions.
    for k in 0..5 {
        let s = dsm.reduce(ReduceOp::Sum, me as f64 + 0.5 * k as f64).expect("reduce");
        let want: f64 = (0..n).map(|r| r as f64 + 0.5 * k as f64).sum();
        assert_eq!(s.to_bits(), want.to_bits(), "sum, round {k}");
        assert_eq!(dsm.reduce(ReduceOp::Min, me as i64 - k).expect("min"), -k);
        assert_eq!(dsm.reduce(ReduceOp::Max, me as i64 * k).expect("max"), (n as i64 - 1) * k);
    }
    passed.push("reduce");

    // A panic while holding a guard leaves the lock free (the guard is
    // dropped while the panic unwinds).
    let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _g = dsm.lock("panics").expect("lock");
        panic!("a panic inside the critical section");
    }));
    assert!(hit.is_err());
    let t = Instant::now();
    drop(dsm.lock("panics").expect("the lock is free after the panic"));
    assert!(t.elapsed() < Duration::from_secs(30), "the lock stayed taken after a panic");
    dsm.barrier().expect("barrier");
    passed.push("panic_releases_guard");

    // Placement: a bound process runs only on its share of the cores; the
    // two processes of a 2-process job are bound and share no CPU, unless
    // the node gives a reason (fewer cores than processes, a launcher's
    // binding, no topology).
    let binding = dsm.binding().to_string();
    let allowed = allowed_cpus();
    let bound = binding.starts_with("cores ");
    if bound {
        assert!(allowed.len() < online_cpus(), "{binding}, yet it may run on {allowed:?}");
    } else {
        assert!(
            binding.starts_with("unbound (") || binding.starts_with("bound by its launcher ("),
            "{binding}"
        );
    }
    if n == 2 {
        let all_bound = dsm.reduce(ReduceOp::Min, i64::from(bound)).expect("reduce") == 1;
        let mask: u64 = allowed.iter().filter(|&&c| c < 63).fold(0, |m, &c| m | 1 << c);
        let sum = dsm.reduce(ReduceOp::Sum, mask as i64).expect("reduce");
        let ones = dsm.reduce(ReduceOp::Sum, i64::from(mask.count_ones())).expect("reduce");
        if all_bound {
            // Disjoint masks add without a carry.
            assert_eq!(i64::from(sum.count_ones()), ones, "the two processes share a CPU");
        } else if !bound {
            let why = ["cores)", "launcher", "hwloc", "binding off"];
            assert!(why.iter().any(|w| binding.contains(w)), "rank {me}: {binding}");
        }
    }
    passed.push("placement");
    passed
}

/// The CPUs this process may run on (`Cpus_allowed_list`).
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim();
    cpu_list(list)
}

/// The machine's online CPUs.
fn online_cpus() -> usize {
    let l = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("cpu/online");
    cpu_list(l.trim()).len()
}

/// "0-3,6" -> [0, 1, 2, 3, 6].
fn cpu_list(l: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in l.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        v.extend(a.parse::<usize>().expect("cpu")..=b.parse::<usize>().expect("cpu"));
    }
    v
}

/// What a member does (only when started as one; a plain run passes).
#[test]
fn member() {
    let Some(spec) = std::env::var_os(ROLE).and(std::env::var(SPEC).ok()) else { return };
    // Quiet the expected panic of the guard test.
    std::panic::set_hook(Box::new(|i| {
        if !i.to_string().contains("a panic inside the critical section") {
            eprintln!("{i}");
        }
    }));
    let mut cfg = DsmConfig::new(spec, 1 << 20);
    if std::env::var_os(HELPER).is_some() {
        cfg.progress = Progress::On;
    }
    if std::env::var(MODE).is_ok_and(|m| m == "noshm") {
        cfg.shm = false;
    }
    let dsm = Dsm::join(&cfg).expect("join");
    let passed = litmus(&dsm);
    if dsm.rank() == 0 {
        println!("LITMUS {}", passed.join(","));
    }
    dsm.barrier().expect("barrier");
}

fn start(
    spec: &str,
    (helper, mode): (bool, &str),
    (n, port, secret): (usize, u16, &str),
    r: usize,
) -> Child {
    let mut c = Command::new(std::env::current_exe().expect("own path"));
    if helper {
        c.env(HELPER, "1");
    }
    if mode == "nodes" {
        c.env("RMR_NODE", format!("node{}", r / 2));
    }
    c.env(MODE, mode);
    c.args(["--exact", "member", "--nocapture", "--test-threads", "1"])
        .env(ROLE, "1")
        .env(SPEC, spec)
        .env("RMR_RANK", r.to_string())
        .env("RMR_SIZE", n.to_string())
        .env("RMR_ROOT", format!("127.0.0.1:{port}"))
        .env("RMR_JOB_SECRET", secret)
        .env("RMR_BOOT_TIMEOUT_S", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a member")
}

/// Runs the suite as one job of `n` processes on `spec`; returns the names
/// of the tests rank 0 saw pass. A member that fails ends the job (the
/// others are killed rather than left waiting in a barrier).
fn job(spec: &str, n: usize) -> Vec<String> {
    job_with(spec, false, n)
}

/// [`job`], with the runtime's progress thread forced on (`helper`) or as
/// [`Progress::Auto`] decides (on with 4 processes on a 2-CPU machine).
fn job_with(spec: &str, helper: bool, n: usize) -> Vec<String> {
    job_in(spec, (helper, "plain"), n)
}

/// [`job_with`] in a `mode` (see [`MODE`]).
fn job_in(spec: &str, how: (bool, &str), n: usize) -> Vec<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let secret = rmr::boot::fresh_secret();
    let mut kids: Vec<Child> = (0..n).map(|r| start(spec, how, (n, port, &secret), r)).collect();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut failed = None;
    while failed.is_none() && kids.iter_mut().any(|k| k.try_wait().ok().flatten().is_none()) {
        for (r, k) in kids.iter_mut().enumerate() {
            if let Ok(Some(st)) = k.try_wait()
                && !st.success()
            {
                failed = Some(r);
            }
        }
        assert!(Instant::now() < deadline, "{spec}, {n} processes: the job did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    if failed.is_some() {
        for k in &mut kids {
            let _ = k.kill();
        }
    }
    let outs: Vec<_> = kids.into_iter().map(|k| k.wait_with_output().expect("wait")).collect();
    let failed = failed.or_else(|| outs.iter().position(|o| !o.status.success()));
    if let Some(r) = failed {
        let all: String = outs
            .iter()
            .enumerate()
            .filter(|(_, o)| !o.status.success())
            .map(|(q, o)| {
                format!("--- rank {q} ({}):\n{}\n", o.status, String::from_utf8_lossy(&o.stderr))
            })
            .collect();
        panic!("{spec}, {n} processes: rank {r} failed first\n{all}");
    }
    String::from_utf8_lossy(&outs[0].stdout)
        .lines()
        .find_map(|l| l.find("LITMUS ").map(|i| l[i + 7..].trim().to_string()))
        .map(|l| l.split(',').map(str::to_string).collect())
        .unwrap_or_default()
}

const ALL: [&str; 14] = [
    "bad_input",
    "message_passing_lock",
    "message_passing_barrier",
    "prefetch_then_barrier",
    "store_buffering",
    "lock_counter",
    "write_then_lock",
    "nested_locks",
    "threads_lock_while_reading",
    "false_sharing",
    "many_pages",
    "reduce",
    "panic_releases_guard",
    "placement",
];

#[test]
fn litmus_on_tcp_with_2_and_4_processes() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for n in [2, 4] {
        assert_eq!(job("tcp:127.0.0.1", n), ALL, "tcp, {n} processes");
    }
}

#[test]
fn litmus_on_2_rail_multirail_with_2_and_4_processes() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for n in [2, 4] {
        assert_eq!(
            job("multirail:tcp:127.0.0.1,tcp:127.0.0.2", n),
            ALL,
            "2-rail multirail, {n} processes"
        );
    }
}

/// Page data over the network only (the runtime's `shm` off): the path a
/// job spread over nodes takes.
#[test]
fn litmus_on_tcp_without_shared_memory() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    for n in [2, 4] {
        assert_eq!(
            job_in("tcp:127.0.0.1", (false, "noshm"), n),
            ALL,
            "tcp without shm, {n} processes"
        );
    }
}

/// Four processes as two pretend nodes of two: page data over shm inside
/// a node and over tcp between them, in one job.
#[test]
fn litmus_on_two_pretend_nodes_shm_inside_tcp_between() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(job_in("tcp:127.0.0.1", (false, "nodes"), 4), ALL, "2 nodes of 2");
}

/// With the progress thread: it reads the completion queue for good and
/// the waiting threads sleep until it files their completions.
#[test]
fn litmus_on_tcp_with_a_progress_thread() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(job_with("tcp:127.0.0.1", true, 2), ALL, "tcp, 2 processes, progress thread");
}

/// The runtime's synchronisation words are only touched by DTO atomics:
/// no CPU atomic, load or store on registered memory anywhere in it.
#[test]
fn synchronisation_words_are_touched_only_through_dto_atomics() {
    let sources = [
        ("lib.rs", include_str!("../src/lib.rs")),
        ("mesh.rs", include_str!("../src/mesh.rs")),
        ("omp.rs", include_str!("../src/omp.rs")),
        ("runtime.rs", include_str!("../src/runtime.rs")),
        ("shared.rs", include_str!("../src/shared.rs")),
        ("sync.rs", include_str!("../src/sync.rs")),
    ];
    for (file, src) in sources {
        for call in ["atomic_u64(", "load_u64(", "store_u64("] {
            assert!(!src.contains(call), "rmr-dsm's {file} calls {call}..)");
        }
    }
    let sync = sources[5].1;
    assert!(sync.contains("post_cmp_swap(") && sync.contains("post_fetch_add("));
}
