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
    fn default() -> Self {
        let env = |k: &str| std::env::var(k).ok();
        MrConfig {
            engine: env("RMR_MR_ENGINE")
                .and_then(|v| Engine::parse(&v).ok())
                .unwrap_or(Engine::Pinned),
            policy: env("RMR_MR_POLICY")
                .and_then(|v| Policy::parse(&v).ok())
                .unwrap_or(Policy::Even),
            threshold: env("RMR_MR_THRESHOLD")
                .and_then(|v| parse_size(&v).ok())
                .unwrap_or(32 << 10),
            align: 4096,
            bind: env("RMR_MR_BIND").is_none_or(|v| v != "0"),
            direct: env("RMR_MR_DIRECT").and_then(|v| parse_direct(&v).ok()).flatten(),
        }
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
            "bind" => self.bind = value != "0" && value != "false",
            "direct" => self.direct = parse_direct(value)?,
            _ => return Err(format!("unknown multirail option `{key}`")),
        }
        Ok(())
    }
}
