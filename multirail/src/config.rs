//! The multirail layer's settings: the [`Engine`] that posts stripes and
//! the [`MrConfig`] an IA is opened with (spec options over `RMR_MR_*`
//! environment defaults), and their parsers. Names nothing else of the
//! crate but the planner's policy.

use crate::planner::Policy;
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

/// Parses a byte count with an optional `K`, `M` or `G` suffix (powers of two).
///
/// # Errors
/// A message naming the bad text.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().map(|n| n * mul).map_err(|_| format!("bad size `{s}` (e.g. 8, 4K, 1M)"))
}

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
        }
    }
}

/// The variables [`MrConfig::from_env`] reads, the spec option each
/// stands for, and what it does.
const VARS: [(&str, &str, &str); 5] = [
    ("RMR_MR_ENGINE", "engine", "inline, fork-join or pinned"),
    (
        "RMR_MR_POLICY",
        "policy",
        "single, round-robin, even, weighted:W0,W1,.. or adaptive[:n,b,alpha]",
    ),
    ("RMR_MR_THRESHOLD", "threshold", "DTOs below this size go whole to one rail (8, 4K, 1M)"),
    ("RMR_MR_BIND", "bind", "bind pinned rail threads to cores with hwloc (0/1)"),
    (
        "RMR_MR_DIRECT",
        "direct",
        "largest stripe a pinned caller posts itself (auto, all or a size)",
    ),
];

impl MrConfig {
    /// The defaults with the `RMR_MR_*` variables applied (what a
    /// `multirail:` spec starts from; its own options come after).
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming a variable whose value does
    /// not parse (`RMR_MR_THRESHOLD=12Q`): never a silent default.
    pub fn from_env() -> rmr_api::Result<MrConfig> {
        let mut c = MrConfig::default();
        for (var, key, _) in VARS {
            let v = rmr_api::provider::settings::env_setting(var, |v| {
                let mut probe = c.clone();
                probe.set(key, v).map(|()| v.to_string())
            })?;
            if let Some(v) = v {
                c.set(key, &v).map_err(|accepted| rmr_api::Error::BadSetting {
                    var: var.into(),
                    value: v.clone(),
                    accepted,
                })?;
            }
        }
        Ok(c)
    }

    /// Every setting a `multirail:` IA starts from, its value and where it
    /// came from (what `rmr-bench info` prints).
    ///
    /// # Errors
    /// As [`MrConfig::from_env`].
    pub fn settings() -> rmr_api::Result<Vec<rmr_api::provider::settings::Setting>> {
        use rmr_api::provider::settings::{Setting, Source};
        let c = MrConfig::from_env()?;
        let values = [
            c.engine.to_string(),
            c.policy.to_string(),
            c.threshold.to_string(),
            u8::from(c.bind).to_string(),
            c.direct.map_or("auto".into(), |d| {
                if d == u64::MAX { "all".into() } else { d.to_string() }
            }),
        ];
        Ok(VARS
            .iter()
            .zip(values)
            .map(|((name, _, doc), value)| Setting {
                name,
                value,
                source: if std::env::var_os(name).is_some() {
                    Source::Env
                } else {
                    Source::Default
                },
                doc,
            })
            .collect())
    }
}

impl MrConfig {
    /// Applies one `key=value` option (`engine`, `policy`, `threshold`,
    /// `align`, `bind`, `direct`).
    ///
    /// # Errors
    /// A message naming the bad option.
    pub fn set(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        match key {
            "engine" => self.engine = Engine::parse(value)?,
            "policy" => self.policy = Policy::parse(value)?,
            "threshold" => self.threshold = parse_size(value)?,
            "align" => self.align = parse_size(value)?.max(1),
            "bind" => self.bind = rmr_api::provider::settings::switch(value)?,
            "direct" => self.direct = parse_direct(value)?,
            _ => return Err(format!("unknown multirail option `{key}`")),
        }
        Ok(())
    }
}
