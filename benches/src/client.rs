//! `rmr-bench client`: the measurement rounds against a server (bandwidth,
//! latency, paired rounds taking turns, the baselines beside them) and what
//! a run prints about itself (row tables, the run's metadata).

use super::*;

/// Runs the client's sweep, returning rows (and printing them as it goes).
/// Runs the client's sweep. With `progress`, advances it per point; rows
/// are printed as they come unless `quiet` (the demo prints its own table).
pub(crate) fn run_client(
    a: &ClientArgs,
    progress: Option<&indicatif::ProgressBar>,
    quiet: bool,
) -> Vec<Row> {
    register();
    let c = &a.common;
    let sz = sizes(&a.sizes);
    let max = sz.iter().copied().max().unwrap_or(8);
    let (ia, remote, port) = client_ia(a);
    let mut conn = Conn::connect(&ia, &remote, port, max)
        .unwrap_or_else(|e| die(format!("connect {remote}:{port}: {e}")));
    conn.validate = a.validate;
    let n = remote.split(',').count();
    let mut one = a.paired.then(|| one_rail_conn(a, n, max));
    let mut versus = a.versus.as_deref().map(|e| versus_conn(a, e, n, max));
    if !quiet {
        print_meta(a, progress);
    }
    if a.fmt() == Format::Text && progress.is_none() {
        for (k, v) in conn.ep_notes() {
            eprintln!("# {k} = {v}");
        }
    }
    let (engine, policy) = if n == 1 {
        ("-".to_string(), "-".to_string())
    } else {
        (c.engine.clone(), c.policy.clone())
    };
    let peers: Vec<IpAddr> = c.rails.iter().filter_map(|r| r.parse().ok()).collect();
    let mut rows = Vec::new();
    for &size in &sz {
        let lat = a.test == "lat";
        let iters = a.iters.unwrap_or(if lat { 2000 } else { auto_iters(size) });
        let warmup = a.warmup.unwrap_or((iters / 10).max(1));
        let mut row = Row {
            test: a.test.clone(),
            backend: if c.world.is_some() { "zipper".into() } else { c.backend.clone() },
            rails: n,
            engine: engine.clone(),
            policy: policy.clone(),
            threshold: (n > 1).then(|| parse_size(&c.threshold).unwrap_or(0)),
            size,
            iters,
            sndbuf: conn.sndbuf(),
            ..Row::default()
        };
        match a.test.as_str() {
            "bw" if versus.is_some() => {
                let (other, v) = versus.as_mut().expect("versus");
                let (so, sm) = paired_bw(other, &mut conn, size, iters, warmup);
                let r2 = Row { engine: v.clone(), ..row.clone() }.paired_bw(&so.0, so.1);
                print_row(a, progress, quiet, &r2);
                rows.push(r2);
                row = row.paired_bw(&sm.0, sm.1);
                row.ratio_engine = Some(sm.0.median / so.0.median);
            }
            "bw" if one.is_some() => {
                let o = one.as_mut().expect("paired");
                let (s1, sm) = paired_bw(o, &mut conn, size, iters, warmup);
                let one_rail = Row {
                    rails: 1,
                    engine: "-".into(),
                    policy: "-".into(),
                    threshold: None,
                    ..row.clone()
                };
                let mut r1 = one_rail.paired_bw(&s1.0, s1.1);
                row = row.paired_bw(&sm.0, sm.1);
                row.ratio_one = Some(sm.0.median / s1.0.median);
                if a.baseline && peers.len() == n {
                    // Raw TCP after the pair: one stream on the first rail
                    // beside the one-rail row, one per rail beside the other.
                    raw_bw_baseline(&mut r1, &peers[..1], c.port, iters, warmup);
                    raw_bw_baseline(&mut row, &peers, c.port, iters, warmup);
                }
                print_row(a, progress, quiet, &r1);
                rows.push(r1);
            }
            "bw" | "breakdown" => {
                let meter = cpu::CpuMeter::start();
                let (s, (post, wait)) =
                    conn.bw_loop(size, iters, warmup).unwrap_or_else(|e| die(e));
                row.cpus = meter.busy_cpus();
                row.mbps = Some(s.median);
                row.mbps_min = Some(s.min);
                row.mbps_max = Some(s.max);
                if a.test == "breakdown" {
                    row.post_us = Some(post);
                    row.wait_us = Some(wait);
                }
                if a.baseline && peers.len() == n {
                    raw_bw_baseline(&mut row, &peers, c.port, iters, warmup);
                }
            }
            "bibw" => {
                let (s, peer) = conn.bibw(size, iters, warmup).unwrap_or_else(|e| die(e));
                row.mbps = Some(s.median + peer);
                row.mbps_min = Some(s.min);
                row.mbps_max = Some(s.max);
            }
            "lat" if one.is_some() => {
                let o = one.as_mut().expect("paired");
                let (s1, s) = paired_lat(o, &mut conn, size, iters, warmup);
                let mut r1 = Row {
                    rails: 1,
                    engine: "-".into(),
                    policy: "-".into(),
                    threshold: None,
                    paired: true,
                    ..row.clone()
                };
                r1.set_latency(&s1);
                if a.baseline {
                    raw_lat_baseline(&mut r1, &peers, c.port, warmup);
                }
                print_row(a, progress, quiet, &r1);
                rows.push(r1);
                row.set_latency(&s);
                row.ratio_one = Some(s.median / s1.median);
                row.paired = true;
            }
            "lat" => {
                let s = conn.lat(size, iters, warmup).unwrap_or_else(|e| die(e));
                row.set_latency(&s);
                if a.baseline {
                    raw_lat_baseline(&mut row, &peers, c.port, warmup);
                }
            }
            t => die(format!("unknown test `{t}` (bw, bibw, lat, breakdown)")),
        }
        print_row(a, progress, quiet, &row);
        if let Some(pb) = progress {
            pb.inc(1);
        }
        rows.push(row);
    }
    if let Some(o) = one {
        o.bye();
    }
    if let Some((o, _)) = versus {
        o.bye();
    }
    conn.bye();
    rows
}

/// Adds to a bandwidth row raw TCP streams to `peers` (one each, the
/// server's raw port, `port + 20`), same size and samples, the busy CPUs
/// meanwhile, and the ratio of the two.
fn raw_bw_baseline(row: &mut Row, peers: &[IpAddr], port: u16, iters: u64, warmup: u64) {
    let Some(mbps) = row.mbps else { return };
    let meter = cpu::CpuMeter::start();
    let r = raw::bandwidth(peers, port + 20, row.size, iters, warmup)
        .unwrap_or_else(|e| die(format!("raw tcp: {e}")));
    row.raw_cpus = meter.busy_cpus();
    row.raw_mbps = Some(r.median);
    row.ratio_raw = Some(mbps / r.median);
}

/// Adds to a latency row the raw TCP ping-pong on the first of `peers`
/// (the server's raw port, `port + 20`), same size and samples, and the
/// ratio of the two.
fn raw_lat_baseline(row: &mut Row, peers: &[IpAddr], port: u16, warmup: u64) {
    let (Some(&peer), Some(lat)) = (peers.first(), row.lat_us) else { return };
    let r = raw::latency(peer, port + 20, row.size, row.iters, warmup, true)
        .unwrap_or_else(|e| die(format!("raw tcp: {e}")));
    row.raw_lat_us = Some(r.median);
    row.ratio_raw = Some(lat / r.median);
}

/// Prints a row as it comes (JSON with `--json`), unless `quiet`.
fn print_row(a: &ClientArgs, progress: Option<&indicatif::ProgressBar>, quiet: bool, row: &Row) {
    if quiet {
        return;
    }
    let line = match a.fmt() {
        Format::Json => row.json().to_string(),
        Format::Text => row.line(),
        Format::Csv => row.csv(),
        Format::Osu => row.osu(),
    };
    match progress {
        Some(pb) => pb.suspend(|| println!("{line}")),
        None => println!("{line}"),
    }
}

/// The run's metadata, once, before the rows: in the format's own way
/// (comment lines for text, CSV and OSU; a `"test": "meta"` object for
/// JSON), then the format's header.
fn print_meta(a: &ClientArgs, progress: Option<&indicatif::ProgressBar>) {
    let c = &a.common;
    let rails = if c.rails.is_empty() { "(world)".to_string() } else { c.rails.join(",") };
    let multi = c.rails.len() > 1 || c.world.is_some();
    let meta: Vec<(&str, String)> = vec![
        ("tool", format!("rmr-bench {}", env!("CARGO_PKG_VERSION"))),
        ("commit", commit()),
        ("test", a.test.clone()),
        ("backend", c.backend.clone()),
        ("rails", rails),
        ("mtu", c.rails.iter().map(|r| mtu_towards(r)).collect::<Vec<_>>().join(",")),
        ("engine", if multi { c.engine.clone() } else { "-".into() }),
        ("policy", if multi { c.policy.clone() } else { "-".into() }),
        ("threshold", if multi { c.threshold.clone() } else { "-".into() }),
        ("pinning", cpus_allowed()),
        (
            "units",
            "bandwidth Mbit/s = 10^6 bit/s (osu: MB/s = 10^6 B/s); latency us, half round trip"
                .into(),
        ),
    ];
    let out = |l: String| match progress {
        Some(pb) => pb.suspend(|| println!("{l}")),
        None => println!("{l}"),
    };
    match a.fmt() {
        Format::Json => {
            let mut m = serde_json::Map::new();
            for (k, v) in &meta {
                m.insert((*k).into(), serde_json::json!(v));
            }
            m.insert("test".into(), serde_json::json!("meta"));
            m.insert("measured".into(), serde_json::json!(a.test));
            out(serde_json::Value::Object(m).to_string());
        }
        f => {
            for (k, v) in &meta {
                out(format!("# {k}: {v}"));
            }
            out(match f {
                Format::Csv => Row::csv_header(),
                Format::Osu if a.test == "lat" => format!("# {:<10}{:>18}", "Size", "Latency (us)"),
                Format::Osu => format!("# {:<10}{:>18}", "Size", "Bandwidth (MB/s)"),
                _ => Row::header(),
            });
        }
    }
}

/// The commit measured: `RMR_COMMIT`, else `git describe` of the current
/// directory, else `unknown`.
fn commit() -> String {
    std::env::var("RMR_COMMIT").ok().unwrap_or_else(|| {
        std::process::Command::new("git")
            .args(["describe", "--always", "--dirty"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into())
    })
}

/// The MTU of the interface the route to `addr` leaves by (`ip route get`),
/// or `?`.
fn mtu_towards(addr: &str) -> String {
    let dev =
        std::process::Command::new("ip").args(["-o", "route", "get", addr]).output().ok().and_then(
            |o| {
                let t = String::from_utf8_lossy(&o.stdout).to_string();
                let mut w = t.split_whitespace();
                w.by_ref().find(|x| *x == "dev")?;
                w.next().map(str::to_string)
            },
        );
    dev.and_then(|d| std::fs::read_to_string(format!("/sys/class/net/{d}/mtu")).ok())
        .map_or("?".into(), |m| m.trim().to_string())
}

/// The CPUs this process may run on (`Cpus_allowed_list`).
fn cpus_allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:").map(|v| format!("cpus {}", v.trim()))
            })
        })
        .unwrap_or_else(|| "?".into())
}

/// The one-rail session that `--paired` measures beside the multirail one:
/// the first rail's own backend endpoint, to the server's one-rail port.
fn one_rail_conn(a: &ClientArgs, n: usize, max: u64) -> Conn {
    let c = &a.common;
    if !matches!(a.test.as_str(), "lat" | "bw") || n < 2 || c.world.is_some() {
        die("--paired needs --test lat or bw and two or more --rails (no --world)");
    }
    let local = a.local.first().cloned().unwrap_or_else(|| "0.0.0.0".into());
    let ia = open_rails(&c.backend, &[local]).remove(0);
    Conn::connect(&ia, &c.rails[0], c.port, max)
        .unwrap_or_else(|e| die(format!("connect {}:{}: {e}", c.rails[0], c.port)))
}

/// The session that `--versus` measures beside the main one: the same
/// rails, policy and threshold with engine `engine`, to the same port.
fn versus_conn(a: &ClientArgs, engine: &str, n: usize, max: u64) -> (Conn, String) {
    if a.test != "bw" || n < 2 || a.paired || a.baseline {
        die("--versus needs --test bw and two or more --rails (not with --paired or --baseline)");
    }
    let mut b = a.clone();
    b.common.engine = engine.to_string();
    let (ia, remote, port) = client_ia(&b);
    let conn = Conn::connect(&ia, &remote, port, max)
        .unwrap_or_else(|e| die(format!("connect {remote}:{port} ({engine}): {e}")));
    (conn, engine.to_string())
}

/// One session's share of a paired bandwidth run: its samples' summary
/// and the busy CPUs over its own turns.
type Share = (stats::Summary, Option<f64>);

/// Paired bandwidth: `other` and `main` take turns of a tenth of the
/// samples each (see [`take_turns`]); every turn starts with one unrecorded
/// sample (the rails idled through the other's turn). Returns (other, main).
fn paired_bw(
    other: &mut Conn,
    main: &mut Conn,
    size: u64,
    iters: u64,
    warmup: u64,
) -> (Share, Share) {
    for c in [&mut *other, &mut *main] {
        c.bw_samples(size, 0, warmup).unwrap_or_else(|e| die(e));
    }
    let mut cpu = [cpu::CpuSum::default(), cpu::CpuSum::default()];
    let (a, b) = take_turns(other, main, iters, (iters / 10).max(1), |c, k, i| {
        let m = cpu::CpuMeter::start();
        let v = c.bw_samples(size, k, 1).unwrap_or_else(|e| die(e)).0;
        cpu[usize::from(i)].add(&m);
        v
    });
    ((a, cpu[0].busy_cpus()), (b, cpu[1].busy_cpus()))
}

/// Round trips in one turn of a paired latency run.
const PAIRED_BLOCK: u64 = 100;

/// Paired latency: `one` and `many` take turns of [`PAIRED_BLOCK`] round
/// trips each (see [`take_turns`]); every turn starts with a few
/// unrecorded round trips, as the idle side's peer may have fallen asleep
/// meanwhile. Returns (one, many).
fn paired_lat(
    one: &mut Conn,
    many: &mut Conn,
    size: u64,
    iters: u64,
    warmup: u64,
) -> (stats::Summary, stats::Summary) {
    let turn_warmup = (PAIRED_BLOCK / 10).min(warmup.max(1));
    for c in [&mut *one, &mut *many] {
        c.lat_samples(size, 0, warmup).unwrap_or_else(|e| die(e));
    }
    take_turns(one, many, iters, PAIRED_BLOCK, |c, k, i| {
        // (Stage timelines, with the `stages` feature: t0 one rail, t1 many.)
        rmr_api::stages::set_tag(i);
        c.lat_samples(size, k, turn_warmup).unwrap_or_else(|e| die(e))
    })
}

/// Sessions `a` and `b` take turns of `block` samples each (which goes
/// first alternates) until each has `iters`; `turn(c, k, i)` measures `k`
/// samples on session `i` (0: `a`, 1: `b`). Returns their summaries.
fn take_turns(
    a: &mut Conn,
    b: &mut Conn,
    iters: u64,
    block: u64,
    mut turn: impl FnMut(&mut Conn, u64, u8) -> Vec<f64>,
) -> (stats::Summary, stats::Summary) {
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    let mut a_first = true;
    while (va.len() as u64) < iters {
        let k = block.min(iters - va.len() as u64);
        for i in if a_first { [0, 1] } else { [1, 0] } {
            match i {
                0 => va.extend(turn(a, k, 0)),
                _ => vb.extend(turn(b, k, 1)),
            }
        }
        a_first = !a_first;
    }
    (stats::summarize(&mut va), stats::summarize(&mut vb))
}
