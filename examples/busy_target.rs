//! RDMA reads aimed at a process that computes between its waits, the
//! pattern of a solver whose neighbours read its boundary between two
//! barriers: the target waits for a message (driving its endpoint), then
//! computes for `COMPUTE_US` without calling into rmr; the initiator reads
//! 8 KiB of the target's memory `GAP_US` into that compute and times the
//! read. On the tcp and shm backends the read is answered by the target's
//! progress helper, which takes the endpoint over as the target's thread
//! leaves its wait; prints the read latency's quantiles.
//!
//! ```text
//! cargo run --release -p rmr-examples --example busy_target               # two processes, tcp:127.0.0.1
//! cargo run --release -p rmr-examples --example busy_target -- local shm:busy
//! cargo run --release -p rmr-examples --example busy_target -- server tcp:127.0.0.1 7480
//! cargo run --release -p rmr-examples --example busy_target -- client tcp:127.0.0.1 127.0.0.1:7480
//! ```
//! `local` runs the target as a child process of its own (a thread of
//! this one would share its helper). `RMR_BUSY_ROUNDS` (default 40),
//! `RMR_BUSY_COMPUTE_US` (default 20000), `RMR_BUSY_GAP_US` (default
//! 1000) and `RMR_BUSY_IDLE_US` (how long the target then waits for the
//! next message, as for a slower peer at a barrier; default 2000) change
//! the run (the initiator's settings; the target reads the compute time
//! and `RMR_BUSY_POLLS`, waits of a millisecond that find nothing before
//! each wait for the next message, default 0); `scripts/bench-busy-target.sh` pins the two
//! processes to their own CPUs and compares two builds.

use rmr::{Access, Cookie, DtoFlags, EpEvds, MemRegion, Result, RmrContext, Sge};
use std::time::{Duration, Instant};

/// Bound on every wait: a peer that vanishes ends the run with an error.
const WAIT: Duration = Duration::from_secs(60);
/// Bytes read per round.
const LEN: u64 = 8 << 10;

fn knob(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Computes for `d` without calling into rmr.
fn compute_for(d: Duration) {
    let t = Instant::now();
    let mut x = 1u64;
    while t.elapsed() < d {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

fn server(spec: &str, port: u16, rounds: u64, compute: Duration) -> Result<()> {
    let ia = rmr::open(spec)?;
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let data = MemRegion::new(LEN as usize);
    let lmr = pz.register_all(&data, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    let note = MemRegion::new(8);
    let note_lmr = pz.register_all(&note, Access::LOCAL_WRITE)?;
    let listener = ia.listen(port)?;
    println!("target: listening on {}:{}", listener.address(), listener.service());
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    listener.accept(&ep, &lmr.rmr_context().to_bytes(), WAIT)?;
    // Waits of a millisecond that find nothing, before each wait for the
    // go (a rank that polls for messages for a while, then waits long).
    let polls = knob("RMR_BUSY_POLLS", 0);
    for round in 0..rounds {
        ep.post_recv(&[Sge::whole(&*note_lmr)], Cookie(round), DtoFlags::empty())?;
        let mut go = false;
        for _ in 0..polls {
            match evd.wait_dto(Duration::from_millis(1)) {
                Ok(_) => {
                    go = true;
                    break;
                }
                Err(rmr::Error::Timeout) => {}
                Err(e) => return Err(e),
            }
        }
        if !go {
            evd.wait_dto(WAIT)?; // "go": then compute, no call into rmr
        }
        compute_for(compute);
    }
    evd.wait_closed(WAIT)
}

fn client(spec: &str, host: &str, port: u16, rounds: u64, gap: Duration) -> Result<()> {
    let ia = rmr::open(spec)?;
    let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    let pd = ep.connect_with_retry(host, port, b"", Duration::from_secs(10))?;
    let ctx = RmrContext::from_bytes(&pd)?;
    let mem = MemRegion::new(LEN as usize);
    let lmr = pz.register_all(&mem, Access::LOCAL_WRITE)?;
    let compute = Duration::from_micros(knob("RMR_BUSY_COMPUTE_US", 20_000));
    let idle = Duration::from_micros(knob("RMR_BUSY_IDLE_US", 2000));
    let mut took = Vec::with_capacity(rounds as usize);
    for round in 0..rounds {
        // The go needs no completion (as a solver's notify would not):
        // nothing in the target is left to answer but the read.
        let go = Instant::now();
        ep.post_send(&[Sge::new(&*lmr, 0, 8)], Cookie(round), DtoFlags::SUPPRESS)?;
        std::thread::sleep(gap);
        let t = Instant::now();
        ep.post_rdma_read(&[Sge::whole(&*lmr)], ctx.at(0), Cookie(round), DtoFlags::empty())?;
        evd.wait_dto(WAIT)?;
        took.push(t.elapsed().as_secs_f64() * 1e6);
        // The next go comes `idle` after the target's compute ended: it
        // waits that long for it (a barrier's wait for a slower peer).
        std::thread::sleep((go + compute + idle).saturating_duration_since(Instant::now()));
    }
    took.sort_by(f64::total_cmp);
    let q = |p: f64| took[((took.len() - 1) as f64 * p).round() as usize];
    println!(
        "read of {LEN} B from a computing target, us: median {:.1} p90 {:.1} min {:.1} max {:.1} ({} reads)",
        q(0.5),
        q(0.9),
        q(0.0),
        q(1.0),
        took.len()
    );
    ep.close(WAIT)?;
    Ok(())
}

fn main() -> Result<()> {
    rmr_examples::init_tracing();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let spec = args.get(1).cloned().unwrap_or_else(|| "tcp:127.0.0.1".into());
    let rounds = knob("RMR_BUSY_ROUNDS", 40).max(1);
    let compute = Duration::from_micros(knob("RMR_BUSY_COMPUTE_US", 20_000));
    let gap = Duration::from_micros(knob("RMR_BUSY_GAP_US", 1000));
    match args.first().map(String::as_str) {
        Some("server") => {
            server(&spec, args.get(2).map_or(7480, |p| p.parse().expect("port")), rounds, compute)
        }
        Some("client") => {
            let to = args.get(2).map_or("127.0.0.1:7480", String::as_str);
            let (h, p) = to.rsplit_once(':').expect("HOST:PORT");
            client(&spec, h, p.parse().expect("port number"), rounds, gap)
        }
        None | Some("local") => {
            use std::io::BufRead;
            let exe = std::env::current_exe().expect("this program's path");
            let mut target = std::process::Command::new(exe)
                .args(["server", &spec, "0"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start the target process");
            // "target: listening on ADDRESS:PORT"
            let mut line = String::new();
            let out = target.stdout.take().expect("the target's output");
            std::io::BufReader::new(out).read_line(&mut line).expect("the target's address");
            let at = line.trim().rsplit(' ').next().unwrap_or_default().to_string();
            let (host, port) = at.rsplit_once(':').expect("ADDRESS:PORT from the target");
            let r = client(&spec, host, port.parse().expect("port number"), rounds, gap);
            let _ = target.wait();
            r
        }
        Some(other) => {
            eprintln!(
                "usage: busy_target [local [SPEC] | server SPEC PORT | client SPEC HOST:PORT] (got {other})"
            );
            std::process::exit(2)
        }
    }
}
