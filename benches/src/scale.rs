//! `rmr-bench scale`: what many connected endpoints cost.
//!
//! Two processes on loopback: this one (the client) and a server it starts
//! (itself, with `--serve`). The client opens N connected endpoint pairs
//! on one IA, many connections in flight at once (`--connectors` threads),
//! and reports the process's threads and resident memory per endpoint
//! after set-up (from `/proc/self/status`), connections per second, and
//! the 8 B write+notify half round trip on one of the N while the other
//! N-1 sit idle, against the same on an endpoint alone on its own IA,
//! the two taking turns in `--rounds` interleaved rounds.
//!
//! `--rails 1` opens `<backend>:127.0.0.1`; `--rails R` a multirail IA over
//! `<backend>:127.0.0.1` .. `127.0.0.R` with `--engine`.

use crate::{die, engine_arg, open_rails, register, stats};
use clap::Args;
use multirail::{Engine, MrConfig, MrIa};
use rmr_api::{
    Access, Cookie, DtoFlags, DtoOp, Ep, EpEvds, Evd, Event, Ia, Lmr, MemRegion, RmrContext, Sge,
};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `rmr-bench scale`.
#[derive(Args, Clone)]
pub(crate) struct ScaleArgs {
    /// Connected endpoint pairs to open on one IA.
    #[arg(long, default_value_t = 256)]
    eps: usize,
    /// Backend of every rail: `tcp`, or `ofi:<provider>`.
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// Rails: 1 (a backend endpoint per connection) or R > 1 (a multirail
    /// endpoint over R loopback rails 127.0.0.1..127.0.0.R).
    #[arg(long, default_value_t = 1)]
    rails: usize,
    /// Multirail engine (with `--rails` > 1): inline, fork-join, pinned.
    #[arg(long, default_value = "pinned", value_parser = engine_arg)]
    engine: String,
    /// Threads that connect (they end before the counts), each keeping up
    /// to `--window` connections in flight with `connect_start` (the tcp
    /// backend connects in the background; other transports' default
    /// connects before returning: one in flight per thread).
    #[arg(long, default_value_t = 16)]
    connectors: usize,
    /// Connections each connector keeps in flight.
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// Base port: the server listens on PORT (the endpoint alone) and
    /// PORT+1 (the N endpoints).
    #[arg(long, default_value_t = 7600)]
    port: u16,
    /// Interleaved latency rounds (each: one block on each endpoint).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Round trips per latency block.
    #[arg(long, default_value_t = 2000)]
    iters: u64,
    /// One JSON object.
    #[arg(long)]
    json: bool,
    /// Run as the server (the client starts it).
    #[arg(long, hide = true)]
    serve: bool,
}

/// Private data of a latency endpoint's connection, before its buffer's
/// context (the server posts receives and echoes on it); idle endpoints
/// send `IDLE`.
const LAT: &[u8] = b"lat";
const IDLE: &[u8] = b"idle";

/// Threads and resident memory (KiB) of this process.
pub(crate) fn proc_status() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    };
    (field("Threads:"), field("VmRSS:"))
}

/// Raises this process's open-file limit to its hard limit; dies with a
/// clear message when even that is below `need`.
pub(crate) fn raise_nofile(need: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    let hard = l.maximum.unwrap_or(u64::MAX);
    if l.current.is_some_and(|c| c < need) {
        l.current = Some(hard.min(need.max(l.current.unwrap_or(0))).max(hard.min(1 << 20)));
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            die(format!("raising the open-file limit to {hard}: {e}"));
        }
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    if now < need {
        die(format!(
            "{need} descriptors needed, the open-file limit is {now} (hard limit {hard}): \
             raise it (`ulimit -Hn`, /etc/security/limits.conf) or ask for fewer --eps"
        ));
    }
}

fn open_ia(a: &ScaleArgs) -> Arc<dyn Ia> {
    let addrs: Vec<String> = (1..=a.rails).map(|k| format!("127.0.0.{k}")).collect();
    let rails = open_rails(&a.backend, &addrs);
    if a.rails == 1 {
        return rails[0].clone();
    }
    let cfg = MrConfig {
        engine: Engine::parse(&a.engine).unwrap_or_else(|e| die(e)),
        ..MrConfig::default()
    };
    MrIa::new(rails, cfg).unwrap_or_else(|e| die(e))
}

fn remote(a: &ScaleArgs) -> String {
    (1..=a.rails).map(|k| format!("127.0.0.{k}")).collect::<Vec<_>>().join(",")
}

/// Descriptors one process needs: a socket per rail per endpoint, and room.
fn need_fds(a: &ScaleArgs) -> u64 {
    ((a.eps + 1) * a.rails.max(1)) as u64 * 2 + 256
}

/// An endpoint that measures write+notify half round trips: an 8 B RDMA
/// write into the peer's buffer, then an 8 B send; the peer answers the
/// same way.
struct LatEp {
    ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    lmr: Arc<dyn Lmr>,
    peer: RmrContext,
    _pz: Arc<dyn rmr_api::Pz>,
}

impl LatEp {
    fn connect(ia: &Arc<dyn Ia>, a: &ScaleArgs, port: u16) -> rmr_api::Result<LatEp> {
        let pz = ia.create_pz()?;
        let evd = ia.create_evd()?;
        let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
        let buf = MemRegion::new(64);
        let lmr = pz.register_all(&buf, Access::ALL)?;
        ep.post_recv(&[Sge::new(&*lmr, 8, 8)], Cookie(1), DtoFlags::empty())?;
        let mut pd = LAT.to_vec();
        pd.extend_from_slice(&lmr.rmr_context().to_bytes());
        let pd = ep.connect(&remote(a), port, &pd, Duration::from_secs(15))?;
        let peer = RmrContext::from_bytes(&pd)?;
        Ok(LatEp { ep, evd, lmr, peer, _pz: pz })
    }

    /// `iters` half round trips (microseconds), after a tenth as warm-up.
    fn samples(&self, iters: u64) -> rmr_api::Result<Vec<f64>> {
        let mut v = Vec::with_capacity(iters as usize);
        let sge = [Sge::new(&*self.lmr, 0, 8)];
        for i in 0..iters + iters / 10 {
            let t0 = Instant::now();
            self.ep.post_rdma_write(&sge, self.peer.at(0), Cookie(0), DtoFlags::SUPPRESS)?;
            self.ep.post_send(&sge, Cookie(0), DtoFlags::SUPPRESS)?;
            loop {
                match self.evd.wait(Some(Duration::from_secs(10)), 1)? {
                    Event::Dto(c) if c.op == DtoOp::Recv => {
                        c.result()?;
                        break;
                    }
                    Event::Dto(c) => c.result().map(|_| ())?,
                    _ => {}
                }
            }
            self.ep.post_recv(&[Sge::new(&*self.lmr, 8, 8)], Cookie(1), DtoFlags::empty())?;
            if i >= iters / 10 {
                v.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        Ok(v)
    }
}

/// The server's latency endpoints and the client buffers they write to.
type LatPeers = Vec<(Arc<dyn Ep>, RmrContext)>;

/// The server: two IAs (the endpoint alone, the N), accepting on one
/// thread per PSP, echoing on the latency endpoints; answers `stats` on
/// stdin with its threads and memory, and ends when stdin closes.
fn serve(a: &ScaleArgs) {
    raise_nofile(need_fds(a));
    let ias = [open_ia(a), open_ia(a)];
    let lat: Arc<Mutex<LatPeers>> = Arc::default();
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut evds = Vec::new();
    let mut psps = Vec::new();
    for (k, ia) in ias.iter().enumerate() {
        let pz = ia.create_pz().unwrap_or_else(|e| die(e));
        let evd = ia.create_evd().unwrap_or_else(|e| die(e));
        let (cevd, pevd) = (
            ia.create_evd().unwrap_or_else(|e| die(e)),
            ia.create_evd().unwrap_or_else(|e| die(e)),
        );
        let port = a.port + k as u16;
        psps.push(
            ia.create_psp(port, &pevd).unwrap_or_else(|e| die(format!("listen {port}: {e}"))),
        );
        let buf = MemRegion::new(64);
        let lmr = pz.register_all(&buf, Access::ALL).unwrap_or_else(|e| die(e));
        evds.push((evd.clone(), lmr.clone()));
        let (ia, lat, accepted) = (ia.clone(), lat.clone(), accepted.clone());
        std::thread::spawn(move || {
            let mut all = Vec::new();
            loop {
                let cr = match pevd.wait(Some(Duration::from_secs(3600)), 1) {
                    Ok(Event::ConnectionRequest(cr)) => cr,
                    Ok(_) => continue,
                    Err(_) => continue,
                };
                let evds = EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() };
                let ep = ia.create_ep(&pz, &evds).unwrap_or_else(|e| die(e));
                let pd = cr.private_data();
                let peer = pd.strip_prefix(LAT).and_then(|c| RmrContext::from_bytes(c).ok());
                if peer.is_some() {
                    ep.post_recv(&[Sge::new(&*lmr, 8, 8)], Cookie(1), DtoFlags::empty())
                        .unwrap_or_else(|e| die(e));
                }
                if cr.accept(&ep, &lmr.rmr_context().to_bytes()).is_err() {
                    continue;
                }
                accepted.fetch_add(1, Ordering::AcqRel);
                if let Some(peer) = peer {
                    lat.lock().unwrap_or_else(|e| e.into_inner()).push((ep.clone(), peer));
                }
                all.push(ep);
                while cevd.dequeue().is_some() {}
            }
        });
    }
    // Echo on the latency endpoints: an 8 B write into the client's
    // buffer (named in its connection's private data), then an 8 B send.
    for (k, (evd, lmr)) in evds.into_iter().enumerate() {
        let lat = lat.clone();
        std::thread::Builder::new()
            .name(format!("echo{k}"))
            .spawn(move || {
                loop {
                    let Ok(Event::Dto(c)) = evd.wait(Some(Duration::from_secs(3600)), 1) else {
                        continue;
                    };
                    if c.op != DtoOp::Recv || c.result().is_err() {
                        continue;
                    }
                    let ep = lat
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .iter()
                        .find(|(e, _)| e.id() == c.ep)
                        .cloned();
                    if let Some((ep, peer)) = ep {
                        let sge = [Sge::new(&*lmr, 0, 8)];
                        let _ =
                            ep.post_recv(&[Sge::new(&*lmr, 8, 8)], Cookie(1), DtoFlags::empty());
                        let _ = ep.post_rdma_write(&sge, peer.at(0), Cookie(0), DtoFlags::SUPPRESS);
                        let _ = ep.post_send(&sge, Cookie(0), DtoFlags::SUPPRESS);
                    }
                }
            })
            .unwrap_or_else(|e| die(e));
    }
    println!("READY");
    let _ = std::io::stdout().flush();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "stats" {
            let (t, rss) = proc_status();
            println!("STATS {} {t} {rss}", accepted.load(Ordering::Acquire));
            let _ = std::io::stdout().flush();
        }
    }
    drop(psps);
    std::process::exit(0);
}

/// The running server and its pipes.
struct Server {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Server {
    fn start(a: &ScaleArgs) -> Server {
        let exe = std::env::current_exe().unwrap_or_else(|e| die(e));
        let mut cmd = Command::new(exe);
        cmd.args(["scale", "--serve", "--eps", &a.eps.to_string(), "--backend", &a.backend])
            .args(["--rails", &a.rails.to_string(), "--engine", &a.engine])
            .args(["--port", &a.port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| die(format!("start the server: {e}")));
        let stdin = child.stdin.take().expect("piped");
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        if out.read_line(&mut line).unwrap_or(0) == 0 || line.trim() != "READY" {
            let _ = child.kill();
            die("the server did not start (see its message above)");
        }
        Server { child, stdin, out }
    }

    /// The server's accepted connections, threads and resident KiB.
    fn stats(&mut self) -> (u64, u64, u64) {
        let _ = writeln!(self.stdin, "stats");
        let mut line = String::new();
        let _ = self.out.read_line(&mut line);
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        match v[..] {
            [n, t, r] => (n, t, r),
            _ => die(format!("unexpected server answer {line:?}")),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `rmr-bench scale`.
pub(crate) fn run(a: &ScaleArgs) {
    register();
    if a.serve {
        serve(a);
        return;
    }
    if a.eps < 1 {
        die("--eps must be at least 1");
    }
    if a.rails < 1 || a.rails > 8 {
        die("--rails must be 1 to 8");
    }
    raise_nofile(need_fds(a));
    let mut server = Server::start(a);
    let (alone_ia, many_ia) = (open_ia(a), open_ia(a));
    let alone = LatEp::connect(&alone_ia, a, a.port).unwrap_or_else(|e| die(e));
    let hot = LatEp::connect(&many_ia, a, a.port + 1).unwrap_or_else(|e| die(e));
    // Settle: the helpers took over what set-up left.
    std::thread::sleep(Duration::from_millis(100));
    let (threads0, rss0) = proc_status();

    // The N-1 idle endpoints, `connectors` connections in flight.
    let pz = many_ia.create_pz().unwrap_or_else(|e| die(e));
    let evd = many_ia.create_evd().unwrap_or_else(|e| die(e));
    let idle_n = a.eps - 1;
    let next = AtomicUsize::new(0);
    let eps: Mutex<Vec<Arc<dyn Ep>>> = Mutex::new(Vec::with_capacity(idle_n));
    let t0 = Instant::now();
    let dest = remote(a);
    std::thread::scope(|s| {
        for _ in 0..a.connectors.clamp(1, idle_n.max(1)) {
            s.spawn(|| {
                // Each connector's connection events on an EVD of its own.
                let cevd = many_ia.create_evd().unwrap_or_else(|e| die(e));
                let evds = EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() };
                let (mut flying, mut more) = (0usize, true);
                while more || flying > 0 {
                    while more && flying < a.window.max(1) {
                        if next.fetch_add(1, Ordering::AcqRel) >= idle_n {
                            more = false;
                            break;
                        }
                        let ep = many_ia.create_ep(&pz, &evds).unwrap_or_else(|e| die(e));
                        ep.connect_start(&dest, a.port + 1, IDLE, Duration::from_secs(30))
                            .unwrap_or_else(|e| die(format!("connect: {e}")));
                        eps.lock().unwrap_or_else(|e| e.into_inner()).push(ep);
                        flying += 1;
                    }
                    if flying == 0 {
                        break;
                    }
                    match cevd.wait(Some(Duration::from_secs(60)), 1) {
                        Ok(Event::Established { .. }) => flying -= 1,
                        Ok(Event::Broken { reason, .. }) => die(format!("connect: {reason}")),
                        Ok(Event::Rejected { .. }) => die("connect: rejected"),
                        Ok(_) => {}
                        Err(e) => die(format!("connect: {e}")),
                    }
                }
            });
        }
    });
    let setup = t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let (threads1, rss1) = proc_status();
    let (served, sthreads, srss) = server.stats();

    // Latency: the endpoint alone and the one among N, taking turns.
    let (mut va, mut vh) = (Vec::new(), Vec::new());
    let (mut pa, mut ph) = (Vec::new(), Vec::new());
    for r in 0..a.rounds.max(1) {
        for which in if r % 2 == 0 { [0, 1] } else { [1, 0] } {
            let (ep, p, v) =
                if which == 0 { (&alone, &mut pa, &mut va) } else { (&hot, &mut ph, &mut vh) };
            let mut s = ep.samples(a.iters).unwrap_or_else(|e| die(e));
            p.push(stats::summarize(&mut s.clone()).median);
            v.append(&mut s);
        }
    }
    let (sa, sh) = (stats::summarize(&mut va), stats::summarize(&mut vh));
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ma, mh) = (med(&mut pa), med(&mut ph));
    let cps = idle_n as f64 / setup.as_secs_f64().max(1e-9);
    let per_ep_kib = rss1.saturating_sub(rss0) as f64 / idle_n.max(1) as f64;
    let ias = 2 * a.rails.max(1);
    if a.json {
        let j = serde_json::json!({
            "test": "scale", "backend": a.backend, "rails": a.rails, "engine": a.engine,
            "eps": a.eps, "connectors": a.connectors, "window": a.window, "ias": ias,
            "threads_before": threads0, "threads": threads1,
            "rss_kib_before": rss0, "rss_kib": rss1, "rss_per_ep_kib": per_ep_kib,
            "connect_s": setup.as_secs_f64(), "conn_per_s": cps,
            "server_eps": served, "server_threads": sthreads, "server_rss_kib": srss,
            "lat_alone_us": ma, "lat_among_us": mh, "lat_ratio": mh / ma,
            "lat_alone_p99_us": sa.p99, "lat_among_p99_us": sh.p99,
            "rounds_alone_us": pa, "rounds_among_us": ph,
        });
        println!("{j}");
    } else {
        println!(
            "scale: {} connected {} endpoint pairs ({} rail{}{}), 2 processes on loopback",
            a.eps,
            a.backend,
            a.rails,
            if a.rails == 1 { "" } else { "s" },
            if a.rails > 1 { format!(", engine {}", a.engine) } else { String::new() }
        );
        println!(
            "  client threads {threads1} ({threads0} before the {idle_n} idle endpoints; {ias} backend IAs)"
        );
        println!("  server threads {sthreads} with {served} accepted");
        println!(
            "  RSS {rss1} KiB ({rss0} before): {per_ep_kib:.1} KiB per idle endpoint; server {srss} KiB"
        );
        println!(
            "  set-up: {idle_n} connections in {:.3} s, {} connectors with up to {} in flight each: {cps:.0} per second",
            setup.as_secs_f64(),
            a.connectors,
            a.window
        );
        println!(
            "  8 B write+notify half round trip, median of {} interleaved rounds: alone {ma:.2} us, among {} {mh:.2} us: {:.3}x (p99 {:.2} / {:.2} us)",
            pa.len(),
            a.eps,
            mh / ma,
            sa.p99,
            sh.p99
        );
    }
    drop(hot);
    drop(alone);
    drop(eps);
    drop(server);
}
