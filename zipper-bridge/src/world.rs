//! The world description: a small TOML file naming the two clusters, each
//! process's global rank, addresses and port, and each bridge's address in
//! cluster A and in cluster B.
//!
//! ```toml
//! [[cluster]]
//! name = "A"            # the first cluster is the "low" one: its ranks come first
//! [[cluster]]
//! name = "B"
//!
//! [[bridge]]
//! a = "198.18.10.2"     # the bridge's address in cluster A
//! b = "198.18.20.1"     # ... and in cluster B
//! port = 7700
//!
//! [[process]]
//! rank = 0
//! cluster = "A"
//! addrs = ["198.18.10.1"]   # rail addresses (the one nearest each bridge is used)
//! port = 7800               # bridged connections; direct ones use port + 1
//! ```

use crate::error::{Result, ZipperError};
use serde::Deserialize;
use std::net::IpAddr;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorld {
    #[serde(default)]
    cluster: Vec<toml::Spanned<RawCluster>>,
    #[serde(default)]
    process: Vec<toml::Spanned<RawProcess>>,
    #[serde(default)]
    bridge: Vec<toml::Spanned<RawBridge>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProcess {
    rank: u32,
    cluster: String,
    addrs: Vec<String>,
    port: u16,
    backend: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBridge {
    a: Option<String>,
    b: Option<String>,
    port: u16,
    backend: Option<String>,
}

/// A cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Its name.
    pub name: String,
}

/// One process of the world.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessDesc {
    /// Global rank.
    pub rank: u32,
    /// Index of its cluster (0 = A, the low one; 1 = B).
    pub cluster: usize,
    /// Its rail addresses.
    pub addrs: Vec<IpAddr>,
    /// Service for bridged connections (direct ones use `port + 1`).
    pub port: u16,
    /// Backend of its rails (default `tcp`).
    pub backend: String,
}

/// One bridge (zipper node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BridgeDesc {
    /// Its address in cluster A.
    pub a: IpAddr,
    /// Its address in cluster B.
    pub b: IpAddr,
    /// Its service on both sides.
    pub port: u16,
    /// Backend of both sides (default `tcp`).
    pub backend: String,
}

impl BridgeDesc {
    /// Its address in cluster `c` (0 = A, 1 = B).
    pub fn addr(&self, c: usize) -> IpAddr {
        if c == 0 { self.a } else { self.b }
    }
}

/// A checked world description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldDesc {
    /// The two clusters, A (low ranks) first.
    pub clusters: Vec<Cluster>,
    /// Every process, by rank.
    pub processes: Vec<ProcessDesc>,
    /// Every bridge.
    pub bridges: Vec<BridgeDesc>,
}

fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

impl WorldDesc {
    /// Reads and checks a world file.
    ///
    /// # Errors
    /// [`ZipperError::Read`], [`ZipperError::Syntax`] or
    /// [`ZipperError::Inconsistent`], naming the line.
    pub fn load(path: impl AsRef<std::path::Path>) -> Result<WorldDesc> {
        let p = path.as_ref();
        let text = std::fs::read_to_string(p)
            .map_err(|source| ZipperError::Read { path: p.display().to_string(), source })?;
        Self::parse(&text, &p.display().to_string())
    }

    /// Parses and checks world text; `name` labels errors.
    ///
    /// # Errors
    /// As [`WorldDesc::load`].
    pub fn parse(text: &str, name: &str) -> Result<WorldDesc> {
        let raw: RawWorld = toml::from_str(text).map_err(|e| ZipperError::Syntax {
            path: name.into(),
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            msg: e.message().trim().to_string(),
        })?;
        let bad = |at: usize, msg: String| ZipperError::Inconsistent {
            path: name.into(),
            line: line_of(text, at),
            msg,
        };
        if raw.cluster.len() != 2 {
            return Err(bad(
                raw.cluster.get(2).map_or(0, |c| c.span().start),
                format!("a world has exactly two clusters, found {}", raw.cluster.len()),
            ));
        }
        if raw.cluster[0].get_ref().name == raw.cluster[1].get_ref().name {
            return Err(bad(
                raw.cluster[1].span().start,
                format!("cluster `{}` declared twice", raw.cluster[1].get_ref().name),
            ));
        }
        let clusters: Vec<Cluster> =
            raw.cluster.iter().map(|c| Cluster { name: c.get_ref().name.clone() }).collect();
        let addr = |at: usize, s: &str| -> Result<IpAddr> {
            s.parse().map_err(|_| bad(at, format!("`{s}` is not an IP address")))
        };
        let mut processes: Vec<(usize, ProcessDesc)> = Vec::new();
        for p in &raw.process {
            let at = p.span().start;
            let r = p.get_ref();
            let cluster = clusters.iter().position(|c| c.name == r.cluster).ok_or_else(|| {
                bad(at, format!("rank {} names unknown cluster `{}`", r.rank, r.cluster))
            })?;
            if let Some((first, _)) = processes.iter().find(|(_, q)| q.rank == r.rank) {
                return Err(bad(
                    at,
                    format!("duplicate rank {} (first at line {})", r.rank, line_of(text, *first)),
                ));
            }
            if r.addrs.is_empty() {
                return Err(bad(at, format!("rank {} has no addresses", r.rank)));
            }
            let addrs = r.addrs.iter().map(|a| addr(at, a)).collect::<Result<Vec<_>>>()?;
            processes.push((
                at,
                ProcessDesc {
                    rank: r.rank,
                    cluster,
                    addrs,
                    port: r.port,
                    backend: r.backend.clone().unwrap_or_else(|| "tcp".into()),
                },
            ));
        }
        processes.sort_by_key(|(_, p)| p.rank);
        for (i, (at, p)) in processes.iter().enumerate() {
            if p.rank as usize != i {
                return Err(bad(
                    *at,
                    format!(
                        "ranks must be 0..{} without gaps; rank {i} is missing",
                        processes.len()
                    ),
                ));
            }
            if i > 0 && p.cluster < processes[i - 1].1.cluster {
                return Err(bad(
                    *at,
                    format!(
                        "rank {} of cluster `{}` after a rank of cluster `{}`: the first cluster's ranks come first",
                        p.rank,
                        clusters[p.cluster].name,
                        clusters[processes[i - 1].1.cluster].name
                    ),
                ));
            }
        }
        let mut bridges = Vec::new();
        for b in &raw.bridge {
            let at = b.span().start;
            let r = b.get_ref();
            let (Some(a), Some(bb)) = (&r.a, &r.b) else {
                let missing = if r.a.is_none() { &clusters[0].name } else { &clusters[1].name };
                return Err(bad(at, format!("bridge has no address in cluster `{missing}`")));
            };
            bridges.push(BridgeDesc {
                a: addr(at, a)?,
                b: addr(at, bb)?,
                port: r.port,
                backend: r.backend.clone().unwrap_or_else(|| "tcp".into()),
            });
        }
        Ok(WorldDesc {
            clusters,
            processes: processes.into_iter().map(|(_, p)| p).collect(),
            bridges,
        })
    }

    /// The process of global rank `rank`.
    ///
    /// # Errors
    /// [`ZipperError::NoRank`].
    pub fn process(&self, rank: u32) -> Result<&ProcessDesc> {
        self.processes.get(rank as usize).ok_or(ZipperError::NoRank(rank))
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.processes.len()
    }
}

/// The address of `addrs` sharing the longest prefix with `toward`.
pub(crate) fn nearest(addrs: &[IpAddr], toward: IpAddr) -> IpAddr {
    let bits = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(v) => u128::from(u32::from(v)) << 96,
            IpAddr::V6(v) => u128::from(v),
        }
    };
    *addrs
        .iter()
        .max_by_key(|a| (bits(**a) ^ bits(toward)).leading_zeros())
        .expect("at least one address")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[cluster]]
name = "A"
[[cluster]]
name = "B"

[[bridge]]
a = "198.18.10.2"
b = "198.18.20.1"
port = 7700

[[process]]
rank = 0
cluster = "A"
addrs = ["198.18.10.1", "198.18.11.1"]
port = 7800

[[process]]
rank = 1
cluster = "B"
addrs = ["198.18.20.2"]
port = 7800
"#;

    #[test]
    fn good_world() {
        let w = WorldDesc::parse(GOOD, "w").unwrap();
        assert_eq!(w.size(), 2);
        assert_eq!(w.process(1).unwrap().cluster, 1);
        let a0 = &w.process(0).unwrap().addrs;
        assert_eq!(nearest(a0, "198.18.11.2".parse().unwrap()).to_string(), "198.18.11.1");
        assert_eq!(nearest(a0, "198.18.10.2".parse().unwrap()).to_string(), "198.18.10.1");
    }

    fn err_line(text: &str) -> (usize, String) {
        match WorldDesc::parse(text, "w") {
            Err(
                ZipperError::Inconsistent { line, msg, .. } | ZipperError::Syntax { line, msg, .. },
            ) => (line, msg),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn bad_worlds_name_the_line() {
        let dup = GOOD.replace("rank = 1", "rank = 0");
        let (line, msg) = err_line(&dup);
        assert!(msg.contains("duplicate rank 0"), "{msg}");
        assert_eq!(line, 18, "{msg}");
        let unknown = GOOD.replace("cluster = \"B\"", "cluster = \"C\"");
        let (line, msg) = err_line(&unknown);
        assert!(msg.contains("unknown cluster `C`"), "{msg}");
        assert_eq!(line, 18);
        let half = GOOD.replace("b = \"198.18.20.1\"\n", "");
        let (line, msg) = err_line(&half);
        assert!(msg.contains("no address in cluster `B`"), "{msg}");
        assert_eq!(line, 7);
        let (line, msg) = err_line(&GOOD.replace("port = 7700", "port = \"x\""));
        assert_eq!(line, 10, "{msg}");
        let order = GOOD
            .replace("cluster = \"A\"", "cluster = \"X\"")
            .replace("name = \"A\"", "name = \"X\"")
            .replace("rank = 0", "rank = 9")
            .replace("rank = 1", "rank = 0")
            .replace("rank = 9", "rank = 1");
        let (_, msg) = err_line(&order);
        assert!(msg.contains("first cluster's ranks come first"), "{msg}");
    }
}
