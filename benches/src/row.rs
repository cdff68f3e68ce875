//! One result row: printed as a table line or as one JSON object per line.

use serde_json::{Map, Value, json};

/// A measured point.
#[derive(Clone, Debug, Default)]
pub(crate) struct Row {
    /// `bw`, `bibw`, `lat`, `breakdown`, `raw-bw`, `raw-lat`.
    pub(crate) test: String,
    /// Backend name.
    pub(crate) backend: String,
    /// Number of rails.
    pub(crate) rails: usize,
    /// Engine (multirail) or `-`.
    pub(crate) engine: String,
    /// Policy (multirail) or `-`.
    pub(crate) policy: String,
    /// Stripe threshold in bytes (multirail).
    pub(crate) threshold: Option<u64>,
    /// Message size in bytes.
    pub(crate) size: u64,
    /// Measured samples.
    pub(crate) iters: u64,
    /// Bandwidth, Mbit/s (1e6 bits per second), median over samples.
    pub(crate) mbps: Option<f64>,
    /// Slowest sample's bandwidth.
    pub(crate) mbps_min: Option<f64>,
    /// Fastest sample's bandwidth.
    pub(crate) mbps_max: Option<f64>,
    /// Half round trip, microseconds (median).
    pub(crate) lat_us: Option<f64>,
    /// Mean half round trip, microseconds (beside tools that print means).
    pub(crate) lat_mean_us: Option<f64>,
    /// Fastest half round trip, microseconds.
    pub(crate) lat_min_us: Option<f64>,
    /// 99th percentile of the half round trips, microseconds.
    pub(crate) lat_p99_us: Option<f64>,
    /// 99.9th percentile of the half round trips, microseconds.
    pub(crate) lat_p999_us: Option<f64>,
    /// Time per sample spent in post calls, microseconds.
    pub(crate) post_us: Option<f64>,
    /// Time per sample spent waiting for events, microseconds.
    pub(crate) wait_us: Option<f64>,
    /// Raw TCP baseline on the same links (Mbit/s for bandwidth).
    pub(crate) raw_mbps: Option<f64>,
    /// Raw TCP ping-pong half round trip, microseconds.
    pub(crate) raw_lat_us: Option<f64>,
    /// Machine-wide busy CPUs (average) over the rmr bandwidth run,
    /// warm-up included; in the lab both ends share the machine.
    pub(crate) cpus: Option<f64>,
    /// The same over the raw TCP baseline's run.
    pub(crate) raw_cpus: Option<f64>,
    /// rmr / raw TCP (bandwidth), or raw / rmr latency expressed as rmr/raw.
    pub(crate) ratio_raw: Option<f64>,
    /// Measured with `--paired`: the one-rail row and the multirail row of
    /// the same size come from one run, in alternating blocks.
    pub(crate) paired: bool,
    /// Multirail latency over the paired one-rail latency (`--paired`).
    pub(crate) ratio_one: Option<f64>,
    /// Bandwidth over the paired session's of another engine (`--versus`).
    pub(crate) ratio_engine: Option<f64>,
    /// The client's send buffer on each rail (the tcp backend's `sndbuf`
    /// note, separated by ` | `), where its endpoints have one.
    pub(crate) sndbuf: Option<String>,
}

impl Row {
    /// This row with one session's share of a paired bandwidth run (its
    /// samples' summary in Mbit/s, the busy CPUs over its turns).
    pub(crate) fn paired_bw(self, s: &crate::stats::Summary, cpus: Option<f64>) -> Row {
        Row {
            iters: s.n as u64,
            mbps: Some(s.median),
            mbps_min: Some(s.min),
            mbps_max: Some(s.max),
            cpus,
            paired: true,
            ..self
        }
    }

    /// Sets a latency row's median and tails from its samples' summary.
    pub(crate) fn set_latency(&mut self, s: &crate::stats::Summary) {
        self.iters = s.n as u64;
        self.lat_us = Some(s.median);
        self.lat_min_us = Some(s.min);
        self.lat_mean_us = Some(s.mean);
        self.lat_p99_us = Some(s.p99);
        self.lat_p999_us = Some(s.p999);
    }

    /// The JSON object.
    pub(crate) fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("test".into(), json!(self.test));
        m.insert("backend".into(), json!(self.backend));
        m.insert("rails".into(), json!(self.rails));
        m.insert("engine".into(), json!(self.engine));
        m.insert("policy".into(), json!(self.policy));
        if let Some(t) = self.threshold {
            m.insert("threshold".into(), json!(t));
        }
        m.insert("size".into(), json!(self.size));
        m.insert("iters".into(), json!(self.iters));
        let mut opt = |k: &str, v: Option<f64>| {
            if let Some(v) = v {
                m.insert(k.into(), json!((v * 1000.0).round() / 1000.0));
            }
        };
        opt("mbps", self.mbps);
        opt("mbps_min", self.mbps_min);
        opt("mbps_max", self.mbps_max);
        opt("lat_us", self.lat_us);
        opt("lat_min_us", self.lat_min_us);
        opt("lat_mean_us", self.lat_mean_us);
        opt("lat_p99_us", self.lat_p99_us);
        opt("lat_p999_us", self.lat_p999_us);
        opt("post_us", self.post_us);
        opt("wait_us", self.wait_us);
        opt("raw_mbps", self.raw_mbps);
        opt("raw_lat_us", self.raw_lat_us);
        opt("ratio_raw", self.ratio_raw);
        opt("ratio_one", self.ratio_one);
        opt("ratio_engine", self.ratio_engine);
        opt("cpus", self.cpus);
        opt("raw_cpus", self.raw_cpus);
        if self.paired {
            m.insert("paired".into(), json!(true));
        }
        if let Some(b) = &self.sndbuf {
            m.insert("sndbuf".into(), json!(b));
        }
        Value::Object(m)
    }

    /// A human-readable line.
    pub(crate) fn line(&self) -> String {
        let f =
            |v: Option<f64>, w: usize| v.map_or(format!("{:>w$}", "-"), |x| format!("{x:>w$.1}"));
        format!(
            "{:<9} {:<5} {:>2} {:<9} {:<14} {:>8} {} {} {} {} {} {} {} {}",
            self.test,
            self.backend,
            self.rails,
            self.engine,
            self.policy,
            human(self.size),
            f(self.mbps, 9),
            self.cpus.map_or(format!("{:>5}", "-"), |x| format!("{x:>5.2}")),
            f(self.lat_us, 8),
            f(self.lat_p99_us, 8),
            f(self.post_us, 8),
            f(self.wait_us, 8),
            f(self.raw_mbps.or(self.raw_lat_us), 9),
            self.ratio_raw.map_or("     -".into(), |r| format!("{r:>6.2}")),
        )
    }

    /// Header matching [`Row::csv`].
    pub(crate) fn csv_header() -> String {
        "test,backend,rails,engine,policy,threshold,size,iters,mbps,mbps_min,mbps_max,lat_us,\
         lat_min_us,lat_p99_us,lat_p999_us,post_us,wait_us,raw_mbps,raw_lat_us,ratio_raw,cpus,\
         paired,ratio_one"
            .into()
    }

    /// A CSV line (empty fields where a figure does not apply).
    pub(crate) fn csv(&self) -> String {
        let o = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
        [
            self.test.clone(),
            self.backend.clone(),
            self.rails.to_string(),
            self.engine.clone(),
            self.policy.clone(),
            self.threshold.map_or(String::new(), |t| t.to_string()),
            self.size.to_string(),
            self.iters.to_string(),
            o(self.mbps),
            o(self.mbps_min),
            o(self.mbps_max),
            o(self.lat_us),
            o(self.lat_min_us),
            o(self.lat_p99_us),
            o(self.lat_p999_us),
            o(self.post_us),
            o(self.wait_us),
            o(self.raw_mbps),
            o(self.raw_lat_us),
            o(self.ratio_raw),
            o(self.cpus),
            self.paired.to_string(),
            o(self.ratio_one),
        ]
        .iter()
        // No field holds a comma or a quote (names, numbers): plain CSV.
        .map(|f| f.replace(',', ";"))
        .collect::<Vec<_>>()
        .join(",")
    }

    /// An OSU-style line: size, then bandwidth in MB/s (10^6 bytes per
    /// second) or the half round trip in microseconds.
    pub(crate) fn osu(&self) -> String {
        match (self.mbps, self.lat_us) {
            (Some(m), _) => format!("{:<12}{:>18.2}", self.size, m / 8.0),
            (None, Some(l)) => format!("{:<12}{:>18.2}", self.size, l),
            _ => format!("{:<12}{:>18}", self.size, "-"),
        }
    }

    /// Header matching [`Row::line`].
    pub(crate) fn header() -> String {
        format!(
            "{:<9} {:<5} {:>2} {:<9} {:<14} {:>8} {:>9} {:>5} {:>8} {:>8} {:>8} {:>8} {:>9} {:>6}",
            "test",
            "back",
            "rl",
            "engine",
            "policy",
            "size",
            "Mbit/s",
            "cpus",
            "lat_us",
            "p99_us",
            "post_us",
            "wait_us",
            "raw",
            "ratio"
        )
    }
}

/// 4096 -> "4K".
pub(crate) fn human(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}
