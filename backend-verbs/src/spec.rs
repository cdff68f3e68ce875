//! Spec strings and runtime parameters (pure: no IO beyond reading the
//! environment in [`VerbsConfig::from_given`]).

use rmr_api::settings::{Given, Knob, Setting, check_within, within};
use rmr_api::{Error, Result};
use std::net::IpAddr;
use std::time::Duration;

/// What a `verbs:` spec names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// `verbs:<device>[:<port>]`, e.g. `verbs:mlx5_0:1` (port 1 when left out).
    Device {
        /// Device name as `ibv_devices` prints it.
        name: String,
        /// Port number (1-based).
        port: u8,
    },
    /// `verbs:<ip>`: the device and port that rdma_cm binds this address to.
    Addr(IpAddr),
}

impl Spec {
    /// Parses the part after `verbs:`.
    ///
    /// # Errors
    /// [`Error::BadSpec`] for an empty name or a port that is not 1..=255.
    pub fn parse(rest: &str) -> Result<Spec> {
        let rest = rest.trim();
        let bad = |why: &str| Error::BadSpec { spec: format!("verbs:{rest}"), why: why.into() };
        if rest.is_empty() {
            return Err(bad("expected `verbs:<device>[:<port>]` or `verbs:<ip>`"));
        }
        let unbracketed = rest.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            return Ok(Spec::Addr(ip));
        }
        let (name, port) = match rest.rsplit_once(':') {
            Some((n, p)) => {
                let port: u8 = p.parse().map_err(|_| bad("port must be a number 1..=255"))?;
                (n, port)
            }
            None => (rest, 1),
        };
        if port == 0 {
            return Err(bad("ports are numbered from 1"));
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.';
        if name.is_empty() || !name.chars().all(ok) {
            return Err(bad("device names are like `mlx5_0`, `rxe0`, `irdma1`"));
        }
        Ok(Spec::Device { name: name.into(), port })
    }
}

/// Tunables of an IA (see the README's RUNTIME PARAMETERS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Send queue depth per EP (`RMR_VERBS_SQ_DEPTH`, 1024), capped by the device.
    pub sq_depth: u32,
    /// Receive queue depth per EP (`RMR_VERBS_RQ_DEPTH`, 1024), capped by the device.
    pub rq_depth: u32,
    /// Initial CQ size of an EVD (`RMR_VERBS_CQ_DEPTH`, 8192); grown as EPs attach.
    pub cq_depth: u32,
    /// Largest gather/scatter list (`RMR_VERBS_MAX_SGE`, 16), capped by the device.
    pub max_sge: u32,
    /// Inline data asked for per send WR (`RMR_VERBS_INLINE`, 64 bytes; 0 disables).
    pub max_inline: u32,
    /// Every n-th suppressed WR is signalled anyway so the SQ drains
    /// (`RMR_VERBS_SIGNAL_EVERY`, 0 = a quarter of the SQ depth).
    pub signal_every: u32,
    /// Transport retries before a dead peer breaks the EP (`RMR_VERBS_RETRY_COUNT`, 7).
    pub retry_count: u8,
    /// Receiver-not-ready retries, 7 = forever (`RMR_VERBS_RNR_RETRY`, 7).
    pub rnr_retry: u8,
    /// Address and route resolution timeout (`RMR_VERBS_RESOLVE_MS`, 2000).
    pub resolve_timeout: Duration,
    /// How long an EVD waiter polls the CQ before it blocks (`RMR_EVD_SPIN_US`, 20).
    pub spin: Duration,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            sq_depth: 1024,
            rq_depth: 1024,
            cq_depth: 8192,
            max_sge: 16,
            max_inline: 64,
            signal_every: 0,
            retry_count: 7,
            rnr_retry: 7,
            resolve_timeout: Duration::from_millis(2000),
            spin: Duration::from_micros(20),
        }
    }
}

/// The knobs [`VerbsConfig::from_given`] reads, in the order of
/// [`VerbsConfig::settings`], with the range each accepts.
pub const KNOBS: [Knob; 10] = [
    Knob {
        option: "sq_depth",
        var: "RMR_VERBS_SQ_DEPTH",
        doc: "send queue depth per EP (16-65536)",
    },
    Knob {
        option: "rq_depth",
        var: "RMR_VERBS_RQ_DEPTH",
        doc: "receive queue depth per EP (16-65536)",
    },
    Knob { option: "cq_depth", var: "RMR_VERBS_CQ_DEPTH", doc: "initial CQ size of an EVD" },
    Knob { option: "max_sge", var: "RMR_VERBS_MAX_SGE", doc: "largest gather/scatter list (1-64)" },
    Knob { option: "inline", var: "RMR_VERBS_INLINE", doc: "inline bytes per send WR (0-1024)" },
    Knob {
        option: "signal_every",
        var: "RMR_VERBS_SIGNAL_EVERY",
        doc: "signal every n-th suppressed WR (0: a quarter of the SQ)",
    },
    Knob { option: "retry_count", var: "RMR_VERBS_RETRY_COUNT", doc: "transport retries (0-7)" },
    Knob {
        option: "rnr_retry",
        var: "RMR_VERBS_RNR_RETRY",
        doc: "receiver-not-ready retries (0-7, 7 = forever)",
    },
    Knob {
        option: "resolve_ms",
        var: "RMR_VERBS_RESOLVE_MS",
        doc: "address and route resolution timeout (ms)",
    },
    Knob {
        option: "spin_us",
        var: "RMR_EVD_SPIN_US",
        doc: "how long an EVD waiter polls the CQ (us)",
    },
];

/// The range each of [`KNOBS`] accepts.
const RANGES: [(u64, u64); 10] = [
    (16, 1 << 16),
    (16, 1 << 16),
    (64, 1 << 22),
    (1, 64),
    (0, 1024),
    (0, 1 << 16),
    (0, 7),
    (0, 7),
    (10, 600_000),
    (0, 1_000_000),
];

rmr_api::config_builder!(
    /// Builds a [`VerbsConfig`] from the defaults:
    /// `VerbsConfig::builder().sq_depth(256).build()?`.
    VerbsConfigBuilder for VerbsConfig {
        sq_depth: u32,
        rq_depth: u32,
        cq_depth: u32,
        max_sge: u32,
        max_inline: u32,
        signal_every: u32,
        retry_count: u8,
        rnr_retry: u8,
        resolve_timeout: Duration,
        spin: Duration,
    }
);

impl VerbsConfig {
    /// The defaults with the `RMR_VERBS_*` variables applied.
    ///
    /// # Errors
    /// As [`VerbsConfig::from_given`].
    pub fn from_env() -> Result<VerbsConfig> {
        VerbsConfig::from_given(&Given::env())
    }

    /// The defaults, the `RMR_VERBS_*` variables over them and the spec's
    /// options over those (what `verbs:<device>[:<port>][;option=value...]`
    /// opens with).
    ///
    /// # Errors
    /// [`Error::BadSetting`] naming an option or variable whose value does
    /// not parse or is out of its range.
    pub fn from_given(g: &Given) -> Result<VerbsConfig> {
        let mut v = VerbsConfig::default().values();
        for (i, k) in KNOBS.iter().enumerate() {
            if let Some(n) = g.get(k, within(RANGES[i].0, RANGES[i].1))? {
                v[i] = n;
            }
        }
        Ok(VerbsConfig {
            sq_depth: v[0] as u32,
            rq_depth: v[1] as u32,
            cq_depth: v[2] as u32,
            max_sge: v[3] as u32,
            max_inline: v[4] as u32,
            signal_every: v[5] as u32,
            retry_count: v[6] as u8,
            rnr_retry: v[7] as u8,
            resolve_timeout: Duration::from_millis(v[8]),
            spin: Duration::from_micros(v[9]),
        })
    }

    /// The values in [`KNOBS`]' order and units.
    fn values(&self) -> [u64; 10] {
        [
            self.sq_depth.into(),
            self.rq_depth.into(),
            self.cq_depth.into(),
            self.max_sge.into(),
            self.max_inline.into(),
            self.signal_every.into(),
            self.retry_count.into(),
            self.rnr_retry.into(),
            self.resolve_timeout.as_millis() as u64,
            self.spin.as_micros() as u64,
        ]
    }

    /// Checks the values (what a builder's `build` and the constructors
    /// taking a config as given call).
    pub(crate) fn check(&self) -> Result<()> {
        for ((k, (lo, hi)), v) in KNOBS.iter().zip(RANGES).zip(self.values()) {
            check_within(k.option, v, lo, hi)?;
        }
        Ok(())
    }

    /// Every setting a `verbs:` IA opens with under `g`, its value and
    /// where it came from (what `rmr-bench info` prints).
    ///
    /// # Errors
    /// As [`VerbsConfig::from_given`].
    pub fn settings(g: &Given) -> Result<Vec<Setting>> {
        let c = VerbsConfig::from_given(g)?;
        Ok(g.listed(&KNOBS, c.values().map(|v| v.to_string())))
    }

    /// The signalling period for an SQ of `depth` entries: never more than
    /// half the depth, so a full SQ always holds a signalled WR whose
    /// completion retires the unsignalled ones before it.
    pub fn signal_period(&self, depth: u32) -> u32 {
        let half = (depth / 2).max(1);
        match self.signal_every {
            0 => (depth / 4).max(1),
            n => n.min(half),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices_ports_and_addresses() {
        assert_eq!(
            Spec::parse("mlx5_0:1").unwrap(),
            Spec::Device { name: "mlx5_0".into(), port: 1 }
        );
        assert_eq!(Spec::parse("rxe0").unwrap(), Spec::Device { name: "rxe0".into(), port: 1 });
        assert_eq!(
            Spec::parse("mlx5_1:2").unwrap(),
            Spec::Device { name: "mlx5_1".into(), port: 2 }
        );
        assert_eq!(Spec::parse("198.18.0.1").unwrap(), Spec::Addr("198.18.0.1".parse().unwrap()));
        assert_eq!(Spec::parse("fe80::1").unwrap(), Spec::Addr("fe80::1".parse().unwrap()));
        assert_eq!(Spec::parse("[::1]").unwrap(), Spec::Addr("::1".parse().unwrap()));
        for bad in ["", "mlx5_0:0", "mlx5_0:x", ":1", "a b:1", "mlx5_0:300"] {
            assert!(matches!(Spec::parse(bad), Err(Error::BadSpec { .. })), "{bad:?}");
        }
    }

    #[test]
    fn options_are_read_and_bad_values_refused() {
        let given = |rest: &str| Given::split("verbs", rest, &KNOBS).unwrap().1;
        let c = VerbsConfig::from_given(&given("mlx5_0;sq_depth=64;inline=0;rnr_retry=3")).unwrap();
        assert_eq!((c.sq_depth, c.max_inline, c.rnr_retry), (64, 0, 3));
        assert_eq!(c.cq_depth, VerbsConfig::default().cq_depth);
        for bad in ["sq_depth=4", "rnr_retry=99", "cq_depth=junk", "resolve_ms=-1"] {
            let e = VerbsConfig::from_given(&given(&format!("mlx5_0;{bad}"))).unwrap_err();
            assert!(matches!(e, Error::BadSetting { .. }), "{bad}: {e}");
        }
        assert!(VerbsConfig::builder().max_sge(0).build().is_err());
        assert_eq!(VerbsConfig::builder().max_sge(4).build().unwrap().max_sge, 4);
        assert_eq!(VerbsConfig::settings(&Given::env()).unwrap().len(), KNOBS.len());
    }

    #[test]
    fn signal_period_keeps_a_signalled_wr_in_a_full_queue() {
        let mut c = VerbsConfig::default();
        assert_eq!(c.signal_period(1024), 256);
        c.signal_every = 5000;
        assert_eq!(c.signal_period(1024), 512);
        c.signal_every = 3;
        assert_eq!(c.signal_period(1024), 3);
        assert_eq!(c.signal_period(1), 1);
    }
}

/// Data rate of a port from `ibv_port_attr::active_width` and
/// `active_speed` (lanes × per-lane data rate), for multirail weights.
pub fn link_speed_bps(active_width: u8, active_speed: u8) -> Option<u64> {
    let lanes: u64 = match active_width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => return None,
    };
    // Per-lane data rates after line encoding, in Mbit/s.
    let lane_mbps: u64 = match active_speed {
        1 => 2_000,     // SDR
        2 => 4_000,     // DDR
        4 => 8_000,     // QDR
        8 => 10_000,    // FDR10
        16 => 13_636,   // FDR
        32 => 25_000,   // EDR
        64 => 50_000,   // HDR
        128 => 100_000, // NDR
        _ => return None,
    };
    Some(lanes * lane_mbps * 1_000_000)
}

#[cfg(test)]
mod speed_tests {
    use super::link_speed_bps;

    #[test]
    fn port_attributes_give_link_speeds() {
        assert_eq!(link_speed_bps(2, 32), Some(100_000_000_000)); // 4x EDR
        assert_eq!(link_speed_bps(2, 64), Some(200_000_000_000)); // 4x HDR
        assert_eq!(link_speed_bps(1, 4), Some(8_000_000_000)); // 1x QDR
        assert_eq!(link_speed_bps(16, 128), Some(200_000_000_000)); // 2x NDR
        assert_eq!(link_speed_bps(3, 32), None);
        assert_eq!(link_speed_bps(2, 0), None);
    }
}
