//! `rmr-bench demo`: server and client in one process over two loopback
//! rails (127.0.0.1 and 127.0.0.2) on the TCP backend. Sweeps sizes for raw
//! TCP, one rmr rail, and two rails under each engine; prints a table and
//! writes `demo.csv` and `demo.svg`.

use crate::row::{Row, human};
use crate::{ClientArgs, Common, auto_iters, raw, run_client, run_server};
use clap::Args;
use plotters::prelude::*;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Options of the demo.
#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Where the CSV and the chart go.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Fewer sizes and samples (seconds instead of a minute).
    #[arg(long)]
    quick: bool,
    /// Base port for the in-process server.
    #[arg(long, default_value_t = 17470)]
    port: u16,
    /// Print JSON lines instead of the table.
    #[arg(long)]
    json: bool,
}

/// The options of a run over `rails` (server or client), tcp, even, 8K.
pub(crate) fn common(rails: &[&str], port: u16, engine: &str) -> Common {
    Common {
        backend: "tcp".into(),
        rails: rails.iter().map(|s| s.to_string()).collect(),
        port,
        engine: engine.into(),
        policy: "even".into(),
        threshold: "32K".into(),
        world: None,
        rank: None,
        bridges: None,
    }
}

fn client(
    rails: &[&str],
    port: u16,
    engine: &str,
    test: &str,
    sizes: &[u64],
    iters: Option<u64>,
) -> ClientArgs {
    ClientArgs {
        common: common(rails, port, engine),
        peer: None,
        local: rails.iter().map(|s| s.to_string()).collect(),
        test: test.into(),
        sizes: sizes.iter().map(|s| s.to_string()).collect(),
        iters,
        warmup: None,
        baseline: false,
        paired: false,
        versus: None,
        json: true,
        format: crate::Format::Json,
        validate: false,
    }
}

pub(crate) fn run(d: &DemoArgs) {
    let rails = ["127.0.0.1", "127.0.0.2"];
    let stop = Arc::new(AtomicBool::new(false));
    let srv = {
        let (c, s) = (common(&rails, d.port, "pinned"), stop.clone());
        std::thread::spawn(move || run_server(&c, 3600, false, s))
    };
    std::thread::sleep(Duration::from_millis(300));
    let bw_sizes: Vec<u64> = if d.quick {
        vec![16 << 10, 256 << 10, 1 << 20]
    } else {
        vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
    };
    let lat_sizes: Vec<u64> = vec![8, 64, 512, 4096];
    let div = if d.quick { 8 } else { 2 };
    let lat_iters = if d.quick { 300 } else { 2000 };
    let engines = ["inline", "fork-join", "pinned"];
    let points = bw_sizes.len() * (2 + 1 + engines.len()) + lat_sizes.len() * 3;
    let pb = if std::io::stdout().is_terminal() && !d.json {
        let pb = indicatif::ProgressBar::new(points as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
                .expect("template"),
        );
        pb
    } else {
        // Keeps the client runs quiet; the summary is printed at the end.
        indicatif::ProgressBar::hidden()
    };
    let pb = Some(pb);
    let mut rows: Vec<Row> = Vec::new();
    // Raw TCP: one stream, then one per rail in parallel.
    let peers: Vec<std::net::IpAddr> = rails.iter().map(|r| r.parse().expect("ip")).collect();
    for n in [1usize, 2] {
        if let Some(pb) = &pb {
            pb.set_message(format!("raw tcp, {n} stream(s)"));
        }
        for &size in &bw_sizes {
            let iters = (auto_iters(size) / div).max(5);
            let s = raw::bandwidth(&peers[..n], d.port + 20, size, iters, 1).expect("raw tcp");
            rows.push(Row {
                test: "raw-bw".into(),
                backend: "raw".into(),
                rails: n,
                engine: "-".into(),
                policy: "-".into(),
                size,
                iters,
                mbps: Some(s.median),
                mbps_min: Some(s.min),
                mbps_max: Some(s.max),
                ..Row::default()
            });
            if let Some(pb) = &pb {
                pb.inc(1);
            }
        }
    }
    let it = |s: u64| Some((auto_iters(s) / div).max(5));
    // rmr: one rail, then two rails per engine (one client run per size keeps iters per size).
    let mut runs: Vec<(Vec<&str>, &str)> = vec![(vec![rails[0]], "-")];
    for e in engines {
        runs.push((rails.to_vec(), e));
    }
    for (r, e) in &runs {
        if let Some(pb) = &pb {
            pb.set_message(format!("rmr bw, {} rail(s), {e}", r.len()));
        }
        for &size in &bw_sizes {
            let a =
                client(r, d.port, if *e == "-" { "pinned" } else { e }, "bw", &[size], it(size));
            rows.extend(run_client(&a, pb.as_ref(), true));
        }
    }
    for (r, e) in [(vec![rails[0]], "pinned"), (rails.to_vec(), "pinned")] {
        if let Some(pb) = &pb {
            pb.set_message(format!("rmr latency, {} rail(s)", r.len()));
        }
        let a = client(&r, d.port, e, "lat", &lat_sizes, Some(lat_iters));
        rows.extend(run_client(&a, pb.as_ref(), true));
    }
    for &size in &lat_sizes {
        let s = raw::latency(peers[0], d.port + 20, size, lat_iters, lat_iters / 10, true)
            .expect("raw tcp");
        rows.push(Row {
            test: "raw-lat".into(),
            backend: "raw".into(),
            rails: 1,
            engine: "-".into(),
            policy: "-".into(),
            size,
            iters: lat_iters,
            lat_us: Some(s.median),
            ..Row::default()
        });
        if let Some(pb) = &pb {
            pb.inc(1);
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    stop.store(true, Ordering::Release);
    let _ = srv.join();
    add_ratios(&mut rows);
    if d.json {
        for r in &rows {
            println!("{}", r.json());
        }
    } else {
        print_summary(&rows, &bw_sizes, &lat_sizes);
    }
    if let Err(e) = write_outputs(&d.out, &rows, &bw_sizes) {
        eprintln!("rmr-bench demo: could not write outputs: {e}");
        std::process::exit(1);
    }
    if !d.json {
        println!("\nwrote {0}/demo.csv and {0}/demo.svg", d.out.display());
    }
}

/// rmr rows get their raw-TCP baseline (same number of rails) and ratio.
fn add_ratios(rows: &mut [Row]) {
    let raw: Vec<Row> = rows.iter().filter(|r| r.backend == "raw").cloned().collect();
    for r in rows.iter_mut().filter(|r| r.backend != "raw") {
        if r.test == "bw" {
            if let Some(b) =
                raw.iter().find(|b| b.test == "raw-bw" && b.rails == r.rails && b.size == r.size)
            {
                r.raw_mbps = b.mbps;
                r.ratio_raw = Some(r.mbps.unwrap_or(0.0) / b.mbps.unwrap_or(f64::NAN));
            }
        } else if let Some(b) =
            raw.iter().find(|b| r.test == "lat" && b.test == "raw-lat" && b.size == r.size)
        {
            r.raw_lat_us = b.lat_us;
            r.ratio_raw = Some(r.lat_us.unwrap_or(0.0) / b.lat_us.unwrap_or(f64::NAN));
        }
    }
}

fn label(r: &Row) -> String {
    match (r.backend.as_str(), r.rails) {
        ("raw", n) => format!("raw TCP x{n}"),
        (_, 1) => "rmr 1 rail".into(),
        (_, n) => format!("rmr {n} rails {}", r.engine),
    }
}

fn print_summary(rows: &[Row], bw: &[u64], lat: &[u64]) {
    println!(
        "rmr demo: TCP backend, two loopback rails (127.0.0.1, 127.0.0.2), RDMA write bandwidth"
    );
    println!("(20 suppressed writes + 1 notify per sample; Mbit/s, median of samples)\n");
    let mut labels: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.test.ends_with("bw")) {
        let l = label(r);
        if !labels.contains(&l) {
            labels.push(l);
        }
    }
    print!("{:<24}", "size");
    for s in bw {
        print!("{:>10}", human(*s));
    }
    println!();
    for l in &labels {
        print!("{l:<24}");
        for s in bw {
            let v = rows.iter().find(|r| r.test.ends_with("bw") && &label(r) == l && r.size == *s);
            print!("{:>10}", v.and_then(|r| r.mbps).map_or("-".into(), |x| format!("{x:.0}")));
        }
        println!();
    }
    let one = |s: u64| {
        rows.iter().find(|r| r.test == "bw" && r.rails == 1 && r.size == s).and_then(|r| r.mbps)
    };
    let pinned = |s: u64| {
        rows.iter()
            .find(|r| r.test == "bw" && r.rails == 2 && r.engine == "pinned" && r.size == s)
            .and_then(|r| r.mbps)
    };
    print!("{:<24}", "2 rails pinned / 1 rail");
    for s in bw {
        match (pinned(*s), one(*s)) {
            (Some(p), Some(o)) => print!("{:>10.2}", p / o),
            _ => print!("{:>10}", "-"),
        }
    }
    println!("\n\nwrite+notify half round trip (us, median)");
    print!("{:<24}", "size");
    for s in lat {
        print!("{:>10}", human(*s));
    }
    println!();
    for (name, pick) in
        [("raw TCP ping-pong", "raw-lat"), ("rmr 1 rail", "lat1"), ("rmr 2 rails pinned", "lat2")]
    {
        print!("{name:<24}");
        for s in lat {
            let v = rows.iter().find(|r| {
                r.size == *s
                    && match pick {
                        "raw-lat" => r.test == "raw-lat",
                        "lat1" => r.test == "lat" && r.rails == 1,
                        _ => r.test == "lat" && r.rails == 2,
                    }
            });
            print!("{:>10}", v.and_then(|r| r.lat_us).map_or("-".into(), |x| format!("{x:.1}")));
        }
        println!();
    }
    println!(
        "\n(loopback rails share this machine's CPUs: the lab's shaped veth rails, scripts/lab.sh,"
    );
    println!(" show the multirail gain on real links; see BENCHMARKS.md)");
}

fn write_outputs(
    dir: &PathBuf,
    rows: &[Row],
    bw: &[u64],
) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let mut csv =
        String::from("test,backend,rails,engine,policy,size,iters,mbps,lat_us,raw,ratio_raw\n");
    for r in rows {
        let o = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{}\n",
            r.test,
            r.backend,
            r.rails,
            r.engine,
            r.policy,
            r.size,
            r.iters,
            o(r.mbps),
            o(r.lat_us),
            o(r.raw_mbps.or(r.raw_lat_us)),
            o(r.ratio_raw)
        ));
    }
    std::fs::write(dir.join("demo.csv"), csv)?;
    let path = dir.join("demo.svg");
    let root = SVGBackend::new(&path, (900, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = rows.iter().filter_map(|r| r.mbps).fold(1.0f64, f64::max) * 1.1;
    let (x0, x1) = (bw[0] as f64, *bw.last().unwrap_or(&1) as f64);
    let mut chart = ChartBuilder::on(&root)
        .caption("rmr RDMA write bandwidth, TCP backend, loopback rails", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc("Mbit/s")
        .x_label_formatter(&|x| human(*x as u64))
        .draw()?;
    let mut labels: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.test.ends_with("bw")) {
        if !labels.contains(&label(r)) {
            labels.push(label(r));
        }
    }
    for (i, l) in labels.iter().enumerate() {
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.test.ends_with("bw") && &label(r) == l)
            .filter_map(|r| r.mbps.map(|m| (r.size as f64, m)))
            .collect();
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(l.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.9)).draw()?;
    root.present()?;
    Ok(())
}
