//! `rmr-bridge`: the zipper bridge. See `rmr-bridge --help`.
#![forbid(unsafe_code)]

use clap::Parser;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zipper_bridge::{AllowNet, Bridge, BridgeConfig, WorldDesc};

/// Forwards send/recv and RDMA write/read between two clusters.
#[derive(Parser)]
#[command(name = "rmr-bridge", version, about)]
struct Cli {
    /// IA into cluster A, e.g. `tcp:198.18.10.2` (or take it from --world).
    #[arg(long)]
    a: Option<String>,
    /// IA into cluster B, e.g. `tcp:198.18.20.1`.
    #[arg(long)]
    b: Option<String>,
    /// Service (port) on both sides.
    #[arg(long)]
    port: Option<u16>,
    /// A world file: take this bridge's addresses and port from it.
    #[arg(long)]
    world: Option<String>,
    /// Index of this bridge in the world file.
    #[arg(long, default_value_t = 0)]
    bridge: usize,
    /// Who may use the bridge (clients and the targets they name):
    /// addresses or blocks, comma separated (`198.18.0.0/15,10.0.0.7`).
    /// With --world, its processes' addresses are admitted too. A bridge
    /// with neither refuses to start.
    #[arg(long, value_delimiter = ',', value_parser = allow_arg)]
    allow: Vec<AllowNet>,
    /// Largest chunk of a cut-through transfer (e.g. 64K).
    #[arg(long, default_value = "64K")]
    chunk: String,
    /// Data buffers per connection ring.
    #[arg(long, default_value_t = 16)]
    ring: u16,
    /// Behave like the Leiden Zipper's forwarder (one thread, whole
    /// messages, a handshake per message): a benchmark baseline only.
    #[arg(long)]
    store_and_forward: bool,
    /// Do not pin the forwarding threads.
    #[arg(long)]
    no_bind: bool,
    /// Milliseconds a stop lets in-flight transfers finish.
    #[arg(long, default_value_t = 5000)]
    drain_ms: u64,
    /// Print the status line every this many seconds (0: at start and stop only).
    #[arg(long, default_value_t = 0)]
    status_every: u64,
}

fn allow_arg(s: &str) -> Result<AllowNet, String> {
    s.parse()
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("rmr-bridge: {msg}");
    std::process::exit(2)
}

fn main() {
    // Diagnostics, filtered by RUST_LOG (e.g. RUST_LOG=rmr::zipper=trace).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let cli = Cli::parse();
    let mut cfg = BridgeConfig::default();
    if let Some(w) = &cli.world {
        let desc = WorldDesc::load(w).unwrap_or_else(|e| die(e));
        let b = desc
            .bridges
            .get(cli.bridge)
            .unwrap_or_else(|| die(format!("{w} has no bridge {}", cli.bridge)));
        cfg.a = format!("{}:{}", b.backend, b.a);
        cfg.b = format!("{}:{}", b.backend, b.b);
        cfg.port = b.port;
        // The job's members: every process of the world.
        cfg.allow = desc
            .processes
            .iter()
            .flat_map(|p| p.addrs.iter().copied())
            .map(AllowNet::host)
            .collect();
    }
    if let Some(a) = cli.a {
        cfg.a = a;
    }
    if let Some(b) = cli.b {
        cfg.b = b;
    }
    if let Some(p) = cli.port {
        cfg.port = p;
    }
    if cfg.a.is_empty() || cfg.b.is_empty() {
        die("give --a and --b (or --world)");
    }
    cfg.allow.extend(cli.allow.iter().copied());
    cfg.chunk = multirail::parse_size(&cli.chunk).unwrap_or_else(|e| die(format!("--chunk: {e}")));
    cfg.ring = cli.ring;
    cfg.store_and_forward = cli.store_and_forward;
    cfg.bind = !cli.no_bind;
    cfg.drain = Duration::from_millis(cli.drain_ms);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).unwrap_or_else(|e| die(e));
    }
    let bridge = Bridge::start(cfg).unwrap_or_else(|e| die(e));
    eprintln!("{}", bridge.status());
    let mut last = Instant::now();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(20));
        if cli.status_every > 0 && last.elapsed() >= Duration::from_secs(cli.status_every) {
            eprintln!("{}", bridge.status());
            last = Instant::now();
        }
    }
    eprintln!("rmr-bridge: stopping ({} connection(s))", bridge.connections());
    let busy = bridge.stop();
    eprintln!("{}", bridge.status());
    eprintln!(
        "rmr-bridge: stopped; {busy} connection(s) still busy at the deadline (their initiators see errors)"
    );
}
