//! The multirail layer's settings: the [`Engine`] that posts stripes and
//! the [`MrConfig`] an IA is opened with (spec options over `RMR_MR_*`
//! environment defaults), and their parsers. Names nothing else of the
//! crate but the planner's policy.

use crate::planner::Policy;
use rmr_api::settings::{Given, Knob, Setting};
use std::fmt;

/// Who posts stripes and who harvests their completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The caller posts to every rail and polls every rail's EVD.
    Inline,
    /// A rayon scope per DTO posts its stripes in parallel; the caller polls.
    ForkJoin,
    /// One persistent thread per rail, fed by a channel, bound with hwloc.
    Pinned,
}

impl Engine {
    /// Parses `inline`, `fork-join` or `pinned`.
    ///
    /// # Errors
    /// A message listing the engines.
    pub fn parse(s: &str) -> std::result::Result<Engine, String> {
        match s {
            "inline" => Ok(Engine::Inline),
            "fork-join" | "forkjoin" => Ok(Engine::ForkJoin),
            "pinned" => Ok(Engine::Pinned),
            _ => Err(format!("unknown engine `{s}` (inline, fork-join, pinned)")),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::Inline => "inline",
            Engine::ForkJoin => "fork-join",
            Engine::Pinned => "pinned",
        })
    }
}

/// Parses a byte count with an optional `K`, `M` or `G` suffix (powers
/// of two): [`rmr_api::settings::size`].
pub use rmr_api::settings::size as parse_size;

/// Configuration of a multirail IA.
#[derive(Clone, Debug)]
pub struct MrConfig {
    /// The engine.
    pub engine: Engine,
    /// The striping policy.
    pub policy: Policy,
    /// DTOs shorter than this go whole to one rail (bytes); longer ones
    /// are striped. Default 32 KiB (`RMR_MR_THRESHOLD`), the ICBC paper's
    /// value, chosen among 8, 32, 64 and 128 KiB by streams of 16-64 KiB
    /// writes over two shaped rails: whole DTOs spread over the rails
    /// (least outstanding bytes) keep both busy without striping costs,
    /// while one DTO of 32 KiB or more still gets every rail.
    pub threshold: u64,
    /// Stripe boundaries fall on multiples of this (bytes).
    pub align: u64,
    /// Bind pinned rail threads to cores with hwloc.
    pub bind: bool,
    /// With `pinned`: the largest stripe of a striped DTO the caller posts
    /// itself while its rail's thread is idle (larger ones go to the rail
    /// threads, which copy them into every rail at once). `None` (the
    /// default, `direct=auto`) picks: 64 KiB when the node has a core for
    /// every rail thread beside the caller's (more cores than rails), else
    /// every stripe (`direct=all`): with no core to spare, a woken rail
    /// thread only takes the CPU its peer's copy needs. `RMR_MR_DIRECT`.
    pub direct: Option<u64>,
    /// Connect a lost rail again in the background (on the side that
    /// connected; the accepting side takes it) and give it traffic again.
    /// `RMR_MR_REJOIN`, default on.
    pub rejoin: bool,
}

/// Parses a `direct` value: `auto` (None), `all` (every stripe) or a size.
fn parse_direct(v: &str) -> std::result::Result<Option<u64>, String> {
    match v {
        "auto" => Ok(None),
        "all" => Ok(Some(u64::MAX)),
        v => parse_size(v).map(Some),
    }
}

impl Default for MrConfig {
    /// The defaults, whatever the environment says (see
    /// [`MrConfig::from_env`]).
    fn default() -> Self {
        MrConfig {
            engine: Engine::Pinned,
            policy: Policy::Even,
            threshold: 32 << 10,
            align: 4096,
            bind: true,
            direct: None,
            rejoin: true,
        }
    }
}

/// The knobs [`MrConfig::from_given`] reads, in the order of
/// [`MrConfig::settings`].
pub const KNOBS: [Knob; 7] = [
    Knob { option: "engine", var: "RMR_MR_ENGINE", doc: "inline, fork-join or pinned" },
    Knob {
        option: "policy",
        var: "RMR_MR_POLICY",
        doc: "single, round-robin, even, weighted:W0,W1,.. or adaptive[:n,b,alpha]",
    },
    Knob {
        option: "threshold",
        var: "RMR_MR_THRESHOLD",
        doc: "DTOs below this size go whole to one rail (8, 4K, 1M)",
    },
    Knob {
        option: "align",
        var: "RMR_MR_ALIGN",
        doc: "stripe boundaries fall on multiples of this",
    },
    Knob {
        option: "bind",
        var: "RMR_MR_BIND",
        doc: "bind pinned rail threads to cores with hwloc (0/1)",
    },
    Knob {
        option: "direct",
        var: "RMR_MR_DIRECT",
        doc: "largest stripe a pinned caller posts itself (auto, all or a size)",
    },
    Knob {
        option: "rejoin",
        var: "RMR_MR_REJOIN",
        doc: "connect a lost rail again in the background (0/1)",
    },
];

rmr_api::config_builder!(
    /// Builds an [`MrConfig`] from the defaults:
    /// `MrConfig::builder().engine(Engine::Inline).build()?`.
    MrConfigBuilder for MrConfig {
        engine: Engine,
        policy: Policy,
        threshold: u64,
        align: u64,
        bind: bool,
        direct: Option<u64>,
        rejoin: bool,
    }
);

impl MrConfig {
    /// The defaults with the `RMR_MR_*` variables applied.
    ///
    /// # Errors
    /// As [`MrConfig::from_given`].
    pub fn from_env() -> rmr_api::Result<MrConfig> {
        MrConfig::from_given(&Given::env())
    }

    /// The defaults, the `RMR_MR_*` variables over them and the spec's
    /// options over those (what a `multirail:<rails>[;option=value...]`
    /// spec opens with).
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming an option or variable whose
    /// value does not parse (`RMR_MR_THRESHOLD=12Q`): never a silent
    /// default.
    pub fn from_given(g: &Given) -> rmr_api::Result<MrConfig> {
        let mut c = MrConfig::default();
        c.apply(g)?;
        Ok(c)
    }

    /// Applies what `g` gives (its spec options over the `RMR_MR_*`
    /// variables) over this config's values.
    ///
    /// # Errors
    /// As [`MrConfig::from_given`]; the config is then unchanged.
    pub fn apply(&mut self, g: &Given) -> rmr_api::Result<()> {
        let mut c = self.clone();
        for k in &KNOBS {
            let probe = c.clone();
            if let Some(v) = g.get(k, |v| {
                let mut p = probe.clone();
                p.set(k.option, v).map(|()| v.to_string())
            })? {
                c.set(k.option, &v).expect("checked just now");
            }
        }
        c.check()?;
        *self = c;
        Ok(())
    }

    /// Checks the values (what a builder's `build` and the constructors
    /// taking a config as given call).
    pub(crate) fn check(&self) -> rmr_api::Result<()> {
        rmr_api::settings::check_within("align", self.align, 1, 1 << 30)
    }

    /// Every setting a `multirail:` IA opens with under `g`, its value and
    /// where it came from (what `rmr-bench info` prints).
    ///
    /// # Errors
    /// As [`MrConfig::from_given`].
    pub fn settings(g: &Given) -> rmr_api::Result<Vec<Setting>> {
        let c = MrConfig::from_given(g)?;
        let values = [
            c.engine.to_string(),
            c.policy.to_string(),
            c.threshold.to_string(),
            c.align.to_string(),
            u8::from(c.bind).to_string(),
            c.direct.map_or("auto".into(), |d| {
                if d == u64::MAX { "all".into() } else { d.to_string() }
            }),
            u8::from(c.rejoin).to_string(),
        ];
        Ok(g.listed(&KNOBS, values))
    }
}

impl MrConfig {
    /// Applies one `key=value` option (`engine`, `policy`, `threshold`,
    /// `align`, `bind`, `direct`, `rejoin`).
    ///
    /// # Errors
    /// A message naming the bad option.
    pub fn set(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        match key {
            "engine" => self.engine = Engine::parse(value)?,
            "policy" => self.policy = Policy::parse(value)?,
            "threshold" => self.threshold = parse_size(value)?,
            "align" => {
                self.align = parse_size(value)?;
                if self.align == 0 {
                    return Err("expected an alignment of at least 1".into());
                }
            }
            "bind" => self.bind = rmr_api::settings::switch(value)?,
            "direct" => self.direct = parse_direct(value)?,
            "rejoin" => self.rejoin = rmr_api::settings::switch(value)?,
            _ => return Err(format!("unknown multirail option `{key}`")),
        }
        Ok(())
    }
}
