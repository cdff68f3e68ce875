//! The rmr-bench command line as a user meets it: bad choices refused
//! before any connection, and the machine formats (CSV, OSU columns, JSON)
//! that parse, from a real server and client over loopback.

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rmr-bench"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server(port: u16) -> Server {
    let s = bench()
        .args(["server", "--rails", "127.0.0.1", "--port", &port.to_string(), "--idle", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server");
    std::thread::sleep(Duration::from_millis(300));
    Server(s)
}

fn client(port: u16, extra: &[&str]) -> Output {
    let mut c = bench();
    c.args(["client", "--rails", "127.0.0.1", "--port", &port.to_string()]).args(extra);
    c.output().expect("run client")
}

#[test]
fn bad_choices_are_refused_before_connecting() {
    // No server anywhere: a refusal must come from the arguments, naming what is valid.
    for (flag, value, valid) in [
        ("--engine", "warp", "inline, fork-join, pinned"),
        ("--test", "speed", "bw"),
        ("--policy", "random", "round-robin"),
        ("--threshold", "12Q", "size"),
        ("--format", "xml", "osu"),
    ] {
        let o = client(1, &[flag, value]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{flag} {value} accepted");
        assert!(!err.contains("connect"), "{flag} {value}: tried to connect: {err}");
        assert!(err.contains(valid), "{flag} {value}: {err}");
    }
}

#[test]
fn validate_checks_every_sample_that_landed() {
    let port = free_port();
    let _s = server(port);
    let o = client(
        port,
        &["--test", "bw", "--sizes", "4K,1M", "--iters", "20", "--validate", "--format", "csv"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(out.lines().filter(|l| l.starts_with("bw,")).count(), 2, "{out}");
}

#[test]
fn csv_osu_and_json_outputs_parse() {
    let port = free_port();
    let _s = server(port);
    let base = ["--sizes", "8,4K", "--iters", "200", "--warmup", "10"];

    let o = client(port, &[&base[..], &["--test", "lat", "--format", "csv"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{out}");
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{out}");
        let (p50, p99): (f64, f64) =
            (r[col("lat_us")].parse().unwrap(), r[col("lat_p99_us")].parse().unwrap());
        assert!(p50 > 0.0 && p99 >= p50, "{out}");
    }
    assert!(out.contains("# units: bandwidth Mbit/s = 10^6 bit/s"), "{out}");

    let o = client(port, &[&base[..], &["--test", "bw", "--format", "osu"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("# Size") && out.contains("Bandwidth (MB/s)"), "{out}");
    let pts: Vec<(u64, f64)> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap().parse().unwrap(), w.next().unwrap().parse().unwrap())
        })
        .collect();
    assert_eq!(pts.iter().map(|p| p.0).collect::<Vec<_>>(), vec![8, 4096], "{out}");
    assert!(pts.iter().all(|p| p.1 > 0.0), "{out}");

    let o = client(port, &[&base[..], &["--test", "lat", "--json"]].concat());
    let out = String::from_utf8_lossy(&o.stdout);
    let objs: Vec<&str> = out.lines().collect();
    assert!(objs[0].contains("\"test\":\"meta\"") && objs[0].contains("\"commit\""), "{out}");
    assert!(objs[1..].iter().all(|l| l.contains("\"lat_p999_us\"")), "{out}");
    // Each row says what send buffer the client's connection had (a
    // loopback server is on this host: the near buffer).
    assert!(objs[1..].iter().all(|l| l.contains("near: the peer is on this host")), "{out}");
}

/// `rmr-bench scale` as a user runs it: it starts its own server, opens
/// the endpoints and reports a JSON object whose counts add up (the
/// server accepted every pair and the lone one; latencies were measured).
#[test]
fn scale_reports_threads_memory_rate_and_latency() {
    let port = free_port().to_string();
    let o = bench()
        .args(["scale", "--eps", "40", "--rounds", "2", "--iters", "50", "--json", "--port", &port])
        .output()
        .expect("run scale");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(j["eps"], 40, "{out}");
    assert_eq!(j["server_eps"], 41, "the N pairs and the lone one: {out}");
    // Two IAs in the client (a helper each) and its own main thread.
    let threads = j["threads"].as_u64().unwrap();
    assert!((1..=5).contains(&threads), "client threads {threads}: {out}");
    assert!(j["lat_alone_us"].as_f64().unwrap() > 0.0 && j["lat_among_us"].as_f64().unwrap() > 0.0);
    assert!(j["conn_per_s"].as_f64().unwrap() > 0.0, "{out}");
    assert_eq!(j["rounds_alone_us"].as_array().unwrap().len(), 2, "{out}");
}

/// `rmr-bench info` lists every setting with its value and source; a bad
/// value makes it fail, naming the variable.
#[test]
fn info_lists_settings_and_refuses_a_bad_value() {
    let o = bench().arg("info").env("RMR_MR_ENGINE", "inline").output().expect("run info");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find(|l| l.starts_with("RMR_MR_ENGINE")).expect("RMR_MR_ENGINE listed");
    assert!(line.contains("inline") && line.contains("env"), "{line}");
    let line = out.lines().find(|l| l.starts_with("RMR_TCP_BATCH")).expect("RMR_TCP_BATCH listed");
    assert!(line.contains("default"), "{line}");
    // Every provider lists its settings, with or without its hardware.
    for var in ["RMR_OFI_CQ_SIZE", "RMR_VERBS_SQ_DEPTH", "RMR_ZIP_RING", "RMR_EVD_SPIN_US"] {
        assert!(out.lines().any(|l| l.starts_with(var)), "{var} listed: {out}");
    }
    // A spec's options are settings too, and say so.
    let o = bench()
        .args(["info", "tcp:127.0.0.1;batch=0", "multirail:tcp:127.0.0.1;engine=inline"])
        .env("RMR_TCP_BATCH", "1")
        .output()
        .expect("run info");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find(|l| l.starts_with("RMR_TCP_BATCH")).expect("listed");
    assert!(
        line.contains(" 0 ") && line.contains("spec"),
        "the spec wins over the variable: {line}"
    );
    let line = out.lines().find(|l| l.starts_with("RMR_MR_ENGINE")).expect("listed");
    assert!(line.contains("inline") && line.contains("spec"), "{line}");
    // An unknown option fails, naming it.
    let o = bench().args(["info", "ofi:tcp:127.0.0.1;cq_sise=9"]).output().expect("run info");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("cq_sise"));
    let o = bench().arg("info").env("RMR_MR_THRESHOLD", "12Q").output().expect("run info");
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("RMR_MR_THRESHOLD") && out.contains("12Q"), "{out}");
}
