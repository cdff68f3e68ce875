//! `rmr-bench`: rmr's benchmark suite. See `rmr-bench --help`.
#![deny(missing_docs)]

mod barrier;
mod client;
mod cpu;
mod demo;
mod info;
mod raw;
mod row;
mod scale;
mod session;
mod stats;

use client::run_client;

use clap::{Args, Parser, Subcommand, ValueEnum};
use multirail::{Engine, MrConfig, MrIa, Policy, parse_size};
use rmr_api::{Event, Ia};
use row::Row;
use session::Conn;
use std::io::IsTerminal;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// rmr's multirail micro-benchmarks (uDAPL multirail paper method) and baselines.
#[derive(Parser)]
#[command(name = "rmr-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Passive side: listen on every rail address and serve tests.
    Server(ServerArgs),
    /// Active side: run a test against a server.
    Client(ClientArgs),
    /// Server and client in one process over loopback rails: tables, CSV and a chart.
    Demo(demo::DemoArgs),
    /// The RDMA barrier vs the same schedule over send/recv, N local processes.
    Barrier(barrier::BarrierArgs),
    /// Every setting an IA of each spec opens with (one of each provider
    /// when none is given): value, source (default, spec or environment)
    /// and meaning; fails on a bad value.
    Info(info::InfoArgs),
    /// What many connected endpoints cost: threads, memory per endpoint,
    /// connections per second, latency among idle endpoints.
    Scale(scale::ScaleArgs),
    /// Plain TCP streams on the same links: the baseline.
    RawTcp {
        #[command(subcommand)]
        cmd: RawCmd,
    },
}

#[derive(Subcommand)]
enum RawCmd {
    /// Serve raw TCP on each rail address.
    Server {
        /// Rail addresses to listen on, comma separated.
        #[arg(long, value_delimiter = ',', required = true)]
        rails: Vec<IpAddr>,
        /// Port.
        #[arg(long, default_value_t = 7490)]
        port: u16,
        /// Exit after this many seconds.
        #[arg(long, default_value_t = 600)]
        idle: u64,
    },
    /// Measure raw TCP against a raw server.
    Client {
        /// Peer rail addresses, comma separated (one stream per rail).
        #[arg(long, value_delimiter = ',', required = true)]
        rails: Vec<IpAddr>,
        /// Port.
        #[arg(long, default_value_t = 7490)]
        port: u16,
        /// `bw`, `lat` (both ends busy-poll a non-blocking socket: the floor
        /// a spinning rmr waiter is compared with) or `lat-blocking` (both
        /// ends block in `read`: the cost of a wake-up, a second row).
        #[arg(long, default_value = "bw", value_parser = ["bw", "lat", "lat-blocking"])]
        test: String,
        /// Message sizes (e.g. 8,4K,64K,1M).
        #[arg(long, value_delimiter = ',', default_value = "4K,64K,1M")]
        sizes: Vec<String>,
        /// Samples per size (default: by size).
        #[arg(long)]
        iters: Option<u64>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

/// Options shared by server and client.
#[derive(Args, Clone)]
pub(crate) struct Common {
    /// Backend of every rail: `tcp`, `shm` (processes of one node; rail `local`), or `ofi:<provider>` (`ofi:tcp`, `ofi:sockets`,
    /// `ofi:verbs`; plain `ofi` takes libfabric's best); a rail becomes `<backend>:<addr>`.
    #[arg(long, default_value = "tcp")]
    backend: String,
    /// Rail addresses, comma separated (server: local; client: the server's).
    #[arg(long, value_delimiter = ',', required_unless_present = "world")]
    rails: Vec<String>,
    /// Through zipper bridges: a world file (zipper-bridge); the rails are
    /// then one per bridge, from this rank's addresses.
    #[arg(long)]
    world: Option<String>,
    /// This process's rank in --world.
    #[arg(long, requires = "world")]
    rank: Option<u32>,
    /// Use the first N bridges of --world (default: all).
    #[arg(long, requires = "world")]
    bridges: Option<usize>,
    /// Base port: single-rail sessions use PORT, k-rail multirail sessions
    /// PORT+k-1, raw TCP PORT+20.
    #[arg(long, default_value_t = 7470)]
    port: u16,
    /// Multirail engine: inline, fork-join, pinned.
    #[arg(long, default_value = "pinned", value_parser = engine_arg)]
    engine: String,
    /// Multirail policy: single, round-robin, even, weighted:W0,W1,..,
    /// `adaptive[:n_paths,n_batch,alpha]`.
    #[arg(long, default_value = "even", value_parser = policy_arg)]
    policy: String,
    /// Stripe threshold (DTOs below it go whole to one rail).
    #[arg(long, default_value = "32K", value_parser = size_arg)]
    threshold: String,
}

#[derive(Args)]
struct ServerArgs {
    #[command(flatten)]
    common: Common,
    /// Exit after this many seconds without a session.
    #[arg(long, default_value_t = 120)]
    idle: u64,
    /// Exit after the first session ends.
    #[arg(long)]
    once: bool,
}

#[derive(Args, Clone)]
pub(crate) struct ClientArgs {
    #[command(flatten)]
    common: Common,
    /// The peer's rank in --world (the server's).
    #[arg(long, requires = "world")]
    peer: Option<u32>,
    /// Local addresses to bind each rail to (default 0.0.0.0: routed by destination).
    #[arg(long, value_delimiter = ',')]
    local: Vec<String>,
    /// bw, bibw, lat or breakdown.
    #[arg(long, default_value = "bw", value_parser = ["bw", "bibw", "lat", "breakdown"])]
    test: String,
    /// Message sizes (e.g. 8,4K,64K,1M,4M).
    #[arg(long, value_delimiter = ',', default_value = "4K,16K,64K,256K,1M,4M")]
    sizes: Vec<String>,
    /// Samples per size (default: by size, about 256 MiB per size for bw).
    #[arg(long)]
    iters: Option<u64>,
    /// Warm-up samples per size (default: a tenth of the samples, at least 1).
    #[arg(long)]
    warmup: Option<u64>,
    /// Also measure raw TCP on the same links (the server's raw port) and report ratios.
    #[arg(long)]
    baseline: bool,
    /// With `--test lat` or `bw` over several rails: also measure the first
    /// rail alone (its own backend endpoint, as `--rails <first>` would) in
    /// the same run, the two taking turns (latency: blocks of 100 round
    /// trips; bandwidth: a tenth of the samples), and print both rows
    /// (`"paired": true`; the multirail row's `ratio_one` is its latency or
    /// Mbit/s over the one rail's; bandwidth rows' busy CPUs cover their
    /// own turns). A shared, noisy host then weighs on both alike, where
    /// separate runs minutes apart catch different moods.
    /// Built with `--features rmr-api/stages`, client and server also print
    /// each round trip's timeline stage by stage (`# stages` lines; tag t0
    /// the one rail, t1 the multirail session).
    #[arg(long)]
    paired: bool,
    /// With `--test bw` over several rails: also measure a second
    /// multirail session of this engine (same rails, policy and threshold)
    /// in the same run, the two taking turns in blocks of a tenth of the
    /// samples, and print both rows (`"paired": true`, the other engine's
    /// first; the `--engine` row's `ratio_engine` is its Mbit/s over the
    /// other's). Engines compared in separate runs catch different moods of
    /// a shared host, which swing more than the engines differ.
    #[arg(long, value_parser = engine_arg)]
    versus: Option<String>,
    /// Check every byte that landed: each bandwidth sample writes its own
    /// pattern, then reads the server's buffer back and compares (as osu's
    /// `-c` and fabtests' `-v`); a mismatch ends the run with an error.
    /// Slows the run: for correctness, not for figures.
    #[arg(long)]
    validate: bool,
    /// One JSON object per line (the same as `--format json`).
    #[arg(long)]
    json: bool,
    /// Output: `text` (a table), `json` (one object per line, the run's
    /// metadata first as `"test": "meta"`), `csv` (a header, then a row
    /// per point) or `osu` (OSU micro-benchmark columns: `# Size
    /// Bandwidth (MB/s)` with MB = 10^6 bytes, or `# Size  Latency (us)`).
    /// Text and CSV give bandwidth in Mbit/s (10^6 bit/s).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// How the client prints its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// A table for a person.
    Text,
    /// One JSON object per line.
    Json,
    /// Comma-separated values with a header line.
    Csv,
    /// The columns of the OSU micro-benchmarks (osu_bw, osu_latency).
    Osu,
}

impl ClientArgs {
    /// The output format in effect (`--json` is `--format json`).
    pub(crate) fn fmt(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }
}

/// `--engine`, checked while the arguments are parsed (before any connection).
fn engine_arg(s: &str) -> Result<String, String> {
    Engine::parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("{e} (valid: inline, fork-join, pinned)"))
}

/// `--policy`, checked while the arguments are parsed.
fn policy_arg(s: &str) -> Result<String, String> {
    Policy::parse(s).map(|_| s.to_string()).map_err(|e| {
        format!("{e} (valid: single, round-robin, even, weighted:W0,W1,.., adaptive[:n_paths,n_batch,alpha])")
    })
}

/// A size (`--threshold`), checked while the arguments are parsed.
fn size_arg(s: &str) -> Result<String, String> {
    parse_size(s).map(|_| s.to_string())
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("rmr-bench: {msg}");
    std::process::exit(2)
}

fn sizes(v: &[String]) -> Vec<u64> {
    v.iter().map(|s| parse_size(s).unwrap_or_else(|e| die(e))).collect()
}

pub(crate) fn mr_config(c: &Common) -> MrConfig {
    MrConfig {
        engine: Engine::parse(&c.engine).unwrap_or_else(|e| die(e)),
        policy: Policy::parse(&c.policy).unwrap_or_else(|e| die(e)),
        threshold: parse_size(&c.threshold).unwrap_or_else(|e| die(e)),
        ..MrConfig::default()
    }
}

pub(crate) fn register() {
    backend_tcp::register();
    backend_shm::register();
    backend_ofi::register();
    multirail::register();
}

/// Samples for a bandwidth point of `size` bytes: about 256 MiB, 5..=2000.
/// Small sizes get up to 2000 samples (160 MiB at 4 KiB, under a second at
/// 2 Gbit/s): with 200, a 4 KiB point lasted ~70 ms, mostly the
/// connections' start-up, and its median swung 2x from run to run.
pub(crate) fn auto_iters(size: u64) -> u64 {
    ((256u64 << 20) / (session::WRITES_PER_SAMPLE * size.max(1))).clamp(5, 2000)
}

/// The rails' IAs, each opened as one of `addrs.len()` rails (as the
/// `multirail:` provider opens its rails: see
/// `rmr_api::provider::with_rail_share`).
fn open_rails(backend: &str, addrs: &[String]) -> Vec<Arc<dyn Ia>> {
    addrs
        .iter()
        .map(|a| {
            rmr_api::provider::with_rail_share(addrs.len(), || {
                rmr_api::open(&format!("{backend}:{a}"))
            })
            .unwrap_or_else(|e| die(format!("{backend}:{a}: {e}")))
        })
        .collect()
}

/// Bridged rails from `--world` (one per bridge), with the peer's address
/// behind each when `peer` is given.
fn world_rails(c: &Common, peer: Option<u32>) -> Option<Vec<zipper_bridge::BridgeRail>> {
    let w = c.world.as_ref()?;
    let desc = zipper_bridge::WorldDesc::load(w).unwrap_or_else(|e| die(e));
    let rank = c.rank.unwrap_or_else(|| die("--world needs --rank"));
    let nb = c.bridges.unwrap_or(desc.bridges.len());
    let cfg = zipper_bridge::ClientConfig::from_env().unwrap_or_else(|e| die(e));
    Some(zipper_bridge::bridge_rails(&desc, rank, peer, nb, &cfg).unwrap_or_else(|e| die(e)))
}

/// Runs the server until idle (or after one session with `once`).
pub(crate) fn run_server(c: &Common, idle: u64, once: bool, stop: Arc<AtomicBool>) {
    register();
    let rails = match world_rails(c, None) {
        Some(r) => r.into_iter().map(|(ia, _)| ia).collect(),
        None => open_rails(&c.backend, &c.rails),
    };
    let cfg = mr_config(c);
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let active = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut ias: Vec<(Arc<dyn Ia>, u16)> = rails.iter().map(|r| (r.clone(), c.port)).collect();
    for k in 2..=rails.len() {
        let ia: Arc<dyn Ia> =
            MrIa::new(rails[..k].to_vec(), cfg.clone()).unwrap_or_else(|e| die(e));
        ias.push((ia, c.port + k as u16 - 1));
    }
    let mut psps = Vec::new();
    for (ia, port) in ias {
        let evd = ia.create_evd().unwrap_or_else(|e| die(e));
        let psp = ia.create_psp(port, &evd).unwrap_or_else(|e| die(format!("listen {port}: {e}")));
        eprintln!(
            "rmr-bench server: {} rail(s) at {}:{}",
            ia.attr().address.split(',').count(),
            psp.address(),
            port
        );
        let (stop, last, active, done) = (stop.clone(), last.clone(), active.clone(), done.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if let Ok(Event::ConnectionRequest(cr)) =
                    evd.wait(Some(Duration::from_millis(200)), 1)
                {
                    active.fetch_add(1, Ordering::AcqRel);
                    let (ia, last, active, done) =
                        (ia.clone(), last.clone(), active.clone(), done.clone());
                    std::thread::spawn(move || {
                        if let Err(e) = Conn::serve(&ia, &cr) {
                            eprintln!("rmr-bench server: session ended: {e}");
                        }
                        last.store(start.elapsed().as_secs(), Ordering::Release);
                        active.fetch_sub(1, Ordering::AcqRel);
                        done.fetch_add(1, Ordering::AcqRel);
                    });
                }
            }
        });
        psps.push(psp);
    }
    for r in &c.rails {
        if let Ok(ip) = r.parse::<IpAddr>() {
            let s = stop.clone();
            let port = c.port + 20;
            std::thread::spawn(move || {
                if let Err(e) = raw::serve(ip, port, s) {
                    eprintln!("rmr-bench server: raw tcp on {ip}:{port}: {e}");
                }
            });
        }
    }
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        let idle_for = start.elapsed().as_secs().saturating_sub(last.load(Ordering::Acquire));
        if active.load(Ordering::Acquire) == 0
            && (idle_for >= idle || (once && done.load(Ordering::Acquire) > 0))
        {
            break;
        }
    }
    stop.store(true, Ordering::Release);
    drop(psps);
}

/// Opens the client's IA: the plain backend for one rail, multirail otherwise.
/// Returns the IA, the remote address string and the port.
pub(crate) fn client_ia(a: &ClientArgs) -> (Arc<dyn Ia>, String, u16) {
    let c = &a.common;
    let peer = c.world.as_ref().map(|_| a.peer.unwrap_or_else(|| die("--world needs --peer")));
    let (rails, remote) = match world_rails(c, peer) {
        Some(r) => {
            let remote: Vec<String> =
                r.iter().map(|(_, p)| p.clone().unwrap_or_default()).collect();
            (r.into_iter().map(|(ia, _)| ia).collect::<Vec<_>>(), remote.join(","))
        }
        None => {
            let local: Vec<String> = (0..c.rails.len())
                .map(|i| a.local.get(i).cloned().unwrap_or_else(|| "0.0.0.0".into()))
                .collect();
            (open_rails(&c.backend, &local), c.rails.join(","))
        }
    };
    let n = rails.len();
    if n == 1 {
        (rails[0].clone(), remote, c.port)
    } else {
        let ia: Arc<dyn Ia> = MrIa::new(rails, mr_config(c)).unwrap_or_else(|e| die(e));
        (ia, remote, c.port + n as u16 - 1)
    }
}

fn main() {
    // rmr's diagnostics, filtered by RUST_LOG (e.g. RUST_LOG=rmr=debug).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Server(s) => run_server(&s.common, s.idle, s.once, Arc::new(AtomicBool::new(false))),
        Cmd::Client(a) => {
            // A progress bar on stderr for a person watching; none for
            // machine formats or when stderr is not a terminal (scripts, CI).
            let pb = (a.fmt() == Format::Text && std::io::stderr().is_terminal()).then(|| {
                let pb = indicatif::ProgressBar::new(sizes(&a.sizes).len() as u64);
                pb.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} {pos}/{len} sizes {elapsed}",
                    )
                    .expect("template"),
                );
                pb.enable_steady_tick(Duration::from_millis(200));
                pb
            });
            run_client(&a, pb.as_ref(), false);
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
        }
        Cmd::Demo(d) => demo::run(&d),
        Cmd::Barrier(b) => barrier::run(&b),
        Cmd::Scale(s) => scale::run(&s),
        Cmd::Info(a) => info::run(&a),
        Cmd::RawTcp { cmd } => match cmd {
            RawCmd::Server { rails, port, idle } => {
                let stop = Arc::new(AtomicBool::new(false));
                for ip in rails {
                    let s = stop.clone();
                    std::thread::spawn(move || raw::serve(ip, port, s));
                }
                std::thread::sleep(Duration::from_secs(idle));
                stop.store(true, Ordering::Release);
            }
            RawCmd::Client { rails, port, test, sizes: sz, iters, json } => {
                if !json {
                    println!("{}", Row::header());
                }
                for size in sizes(&sz) {
                    let mut row = Row {
                        test: format!("raw-{test}"),
                        backend: "raw".into(),
                        rails: rails.len(),
                        engine: "-".into(),
                        policy: "-".into(),
                        size,
                        ..Row::default()
                    };
                    if test.starts_with("lat") {
                        let it = iters.unwrap_or(2000);
                        row.iters = it;
                        let spin = test == "lat";
                        let r = raw::latency(rails[0], port, size, it, it / 10, spin)
                            .unwrap_or_else(|e| die(e));
                        row.set_latency(&r);
                    } else {
                        let it = iters.unwrap_or(auto_iters(size));
                        row.iters = it;
                        let s = raw::bandwidth(&rails, port, size, it, (it / 10).max(1))
                            .unwrap_or_else(|e| die(e));
                        row.mbps = Some(s.median);
                        row.mbps_min = Some(s.min);
                        row.mbps_max = Some(s.max);
                    }
                    println!("{}", if json { row.json().to_string() } else { row.line() });
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client sweep over two loopback rails (engine pinned) against an
    /// in-process server on `port`; `set` fills in the test's own arguments.
    fn sweep(port: u16, set: impl FnOnce(&mut ClientArgs)) -> Vec<Row> {
        let rails = ["127.0.0.1", "127.0.0.2"];
        let stop = Arc::new(AtomicBool::new(false));
        let srv = {
            let (c, s) = (demo::common(&rails, port, "pinned"), stop.clone());
            std::thread::spawn(move || run_server(&c, 60, false, s))
        };
        std::thread::sleep(Duration::from_millis(300));
        let mut args = ClientArgs {
            common: demo::common(&rails, port, "pinned"),
            peer: None,
            local: rails.iter().map(|s| s.to_string()).collect(),
            test: "bw".into(),
            sizes: Vec::new(),
            iters: None,
            warmup: None,
            baseline: false,
            paired: false,
            versus: None,
            json: true,
            format: Format::Json,
            validate: false,
        };
        set(&mut args);
        let rows = run_client(&args, None, true);
        stop.store(true, Ordering::Release);
        let _ = srv.join();
        rows
    }

    /// `--paired` over two loopback rails, against an in-process server:
    /// per size, a one-rail row and a two-rail row from the same run, each
    /// with every sample it asked for, and the ratio between them.
    #[test]
    fn paired_latency_reports_both_rows_from_one_run() {
        let rows = sweep(17890, |a| {
            a.test = "lat".into();
            a.sizes = vec!["8".into(), "4K".into()];
            (a.iters, a.warmup, a.paired) = (Some(250), Some(5), true);
        });
        assert_eq!(rows.len(), 4, "a one-rail and a two-rail row per size");
        for pair in rows.chunks(2) {
            let (one, two) = (&pair[0], &pair[1]);
            assert_eq!((one.rails, two.rails), (1, 2));
            assert_eq!(one.size, two.size);
            assert!(one.paired && two.paired);
            // Every sample asked for, recorded (the turns' warm-ups aside).
            assert_eq!((one.iters, two.iters), (250, 250));
            let (a, b) = (one.lat_us.expect("one rail"), two.lat_us.expect("two rails"));
            assert!(a > 0.0 && b > 0.0);
            let r = two.ratio_one.expect("ratio");
            assert!((r - b / a).abs() < 1e-9, "{r} vs {b}/{a}");
            assert!(one.json()["paired"] == serde_json::json!(true));
        }
    }

    /// `--paired --baseline` with `--test bw` over two loopback rails: per
    /// size, a one-rail row then a two-rail row from the same run, each with
    /// every sample it asked for, the busy CPUs of its own turns, the ratio
    /// between them, and raw TCP beside each (one stream, two streams).
    #[test]
    fn paired_bandwidth_reports_both_rows_and_raw_tcp_from_one_run() {
        let rows = sweep(17970, |a| {
            a.sizes = vec!["64K".into()];
            (a.iters, a.warmup, a.paired, a.baseline) = (Some(40), Some(2), true, true);
        });
        assert_eq!(rows.len(), 2, "a one-rail and a two-rail row");
        let (one, two) = (&rows[0], &rows[1]);
        assert_eq!((one.rails, two.rails), (1, 2));
        assert_eq!((one.engine.as_str(), two.engine.as_str()), ("-", "pinned"));
        assert!(one.paired && two.paired);
        assert_eq!((one.iters, two.iters), (40, 40));
        let (a, b) = (one.mbps.expect("one rail"), two.mbps.expect("two rails"));
        assert!(a > 0.0 && b > 0.0);
        let r = two.ratio_one.expect("ratio");
        assert!((r - b / a).abs() < 1e-9, "{r} vs {b}/{a}");
        assert!(one.ratio_one.is_none());
        for row in [one, two] {
            let raw = row.raw_mbps.expect("raw TCP beside each row");
            let ratio = row.ratio_raw.expect("ratio to raw TCP");
            assert!((ratio - row.mbps.expect("mbps") / raw).abs() < 1e-9);
        }
    }

    /// `--versus inline` with `--engine pinned` over two loopback rails:
    /// per size, an inline row then a pinned row from the same run, each
    /// with every sample it asked for, and the ratio between them.
    #[test]
    fn versus_reports_both_engines_from_one_run() {
        let rows = sweep(17930, |a| {
            a.sizes = vec!["4K".into(), "64K".into()];
            (a.iters, a.warmup, a.versus) = (Some(40), Some(2), Some("inline".into()));
        });
        assert_eq!(rows.len(), 4, "an inline and a pinned row per size");
        for pair in rows.chunks(2) {
            let (inl, pin) = (&pair[0], &pair[1]);
            assert_eq!((inl.engine.as_str(), pin.engine.as_str()), ("inline", "pinned"));
            assert_eq!((inl.rails, pin.rails), (2, 2));
            assert_eq!(inl.size, pin.size);
            assert!(inl.paired && pin.paired);
            assert_eq!((inl.iters, pin.iters), (40, 40));
            let (a, b) = (inl.mbps.expect("inline"), pin.mbps.expect("pinned"));
            assert!(a > 0.0 && b > 0.0);
            assert!(inl.ratio_engine.is_none());
            let r = pin.ratio_engine.expect("ratio");
            assert!((r - b / a).abs() < 1e-9, "{r} vs {b}/{a}");
            assert_eq!(
                pin.json()["ratio_engine"],
                serde_json::json!((r * 1000.0).round() / 1000.0)
            );
        }
    }
}
