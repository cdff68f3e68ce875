//! [`Bootstrap`]: who am I, how many are we, who shares my node, and an
//! allgather to exchange endpoint addresses — from whichever launcher is there.

use crate::rendezvous::{Rendezvous, RendezvousConfig};
use crate::{Error, NodeMap, Result};
use std::fmt;
use std::time::Duration;

/// Which mechanism a [`Bootstrap`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One process, no launcher.
    Single,
    /// The TCP rendezvous at `RMR_ROOT`.
    Rendezvous,
    /// PMIx, from a launcher (`mpirun`, `srun --mpi=pmix`).
    Pmix,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Single => "single",
            Kind::Rendezvous => "rendezvous",
            Kind::Pmix => "pmix",
        })
    }
}

enum Imp {
    Single,
    Rendezvous(Rendezvous),
    #[cfg(feature = "pmix")]
    Pmix(Box<crate::pmix::Pmix>),
}

/// A joined job: rank, size, node placement, and an out-of-band allgather.
///
/// Collectives ([`Bootstrap::allgather`], [`Bootstrap::barrier`]) must be
/// called by every rank in the same order; they are meant for start-up
/// exchanges (addresses, keys), not for the fast path.
pub struct Bootstrap {
    kind: Kind,
    rank: u32,
    size: u32,
    nodes: NodeMap,
    job: String,
    why: String,
    imp: Imp,
}

/// Default limit for joining and for each collective (`RMR_BOOT_TIMEOUT_S`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

fn env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

fn env_num(var: &'static str) -> Result<Option<u32>> {
    match env(var) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| Error::BadEnv {
            var,
            value: v,
            why: "not a non-negative integer".into(),
        }),
    }
}

/// This host's name (the default node name).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| env("HOSTNAME"))
        .unwrap_or_else(|| "localhost".into())
}

/// The node name: `RMR_NODE` when set (to pretend that processes on one
/// machine live on several nodes), else `default`.
fn node_name(default: impl FnOnce() -> String) -> String {
    env("RMR_NODE").unwrap_or_else(default)
}

fn timeout_from_env() -> Result<Duration> {
    Ok(env_num("RMR_BOOT_TIMEOUT_S")?.map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s.into())))
}

fn pmix_present() -> bool {
    env("PMIX_NAMESPACE").is_some() || env("PMIX_RANK").is_some()
}

impl Bootstrap {
    /// Picks the bootstrap the environment offers, and says which in
    /// [`Bootstrap::kind`] and [`Bootstrap::describe`]:
    ///
    /// 1. `RMR_BOOT=pmix|rendezvous|single` forces one;
    /// 2. else `RMR_ROOT` or `RMR_RANK` set: the TCP rendezvous
    ///    (`RMR_RANK`, `RMR_SIZE`, `RMR_ROOT=host:port`; so a user can
    ///    choose it even under a launcher);
    /// 3. else a PMIx launcher (`PMIX_NAMESPACE`/`PMIX_RANK` set): PMIx;
    /// 4. else a single process.
    ///
    /// `RMR_BOOT_TIMEOUT_S` (30) bounds joining and each collective;
    /// `RMR_NODE` overrides the node name.
    ///
    /// # Errors
    /// [`Error::BadEnv`] for malformed variables, [`Error::Unavailable`]
    /// for PMIx in a build without the `pmix` feature, and the chosen
    /// bootstrap's own errors.
    pub fn from_env() -> Result<Bootstrap> {
        let forced = env("RMR_BOOT");
        let choice = match forced.as_deref() {
            Some("pmix") => Kind::Pmix,
            Some("rendezvous") => Kind::Rendezvous,
            Some("single") => Kind::Single,
            Some(v) => {
                return Err(Error::BadEnv {
                    var: "RMR_BOOT",
                    value: v.into(),
                    why: "expected pmix, rendezvous or single".into(),
                });
            }
            None if env("RMR_ROOT").is_some() || env("RMR_RANK").is_some() => Kind::Rendezvous,
            None if pmix_present() => Kind::Pmix,
            None => Kind::Single,
        };
        let mut b = match choice {
            Kind::Single => Bootstrap::single(),
            Kind::Rendezvous => Bootstrap::rendezvous(&Self::rendezvous_config_from_env()?)?,
            Kind::Pmix => Bootstrap::pmix()?,
        };
        b.why = match (&forced, choice) {
            (Some(_), _) => format!("{}, chosen by RMR_BOOT", b.why),
            (None, Kind::Single) => format!("{} (no launcher in the environment)", b.why),
            (None, Kind::Rendezvous) => format!("{}, from RMR_RANK/RMR_SIZE/RMR_ROOT", b.why),
            (None, Kind::Pmix) => format!("{}, from the launcher's PMIX_* variables", b.why),
        };
        Ok(b)
    }

    /// The rendezvous settings from `RMR_RANK`, `RMR_SIZE`, `RMR_ROOT`,
    /// `RMR_JOB_SECRET`, `RMR_BOOT_TIMEOUT_S` and `RMR_NODE`.
    ///
    /// # Errors
    /// [`Error::BadEnv`] naming the missing or malformed variable.
    pub fn rendezvous_config_from_env() -> Result<RendezvousConfig> {
        let need = |var: &'static str| -> Result<u32> {
            env_num(var)?.ok_or(Error::BadEnv {
                var,
                value: String::new(),
                why: "unset (the rendezvous needs RMR_RANK, RMR_SIZE and RMR_ROOT)".into(),
            })
        };
        let size = need("RMR_SIZE")?;
        let rank = need("RMR_RANK")?;
        let root = match env("RMR_ROOT") {
            Some(r) => r,
            None if size == 1 => String::new(),
            None => {
                return Err(Error::BadEnv {
                    var: "RMR_ROOT",
                    value: String::new(),
                    why: "unset: give the root's host:port, e.g. RMR_ROOT=127.0.0.1:7400".into(),
                });
            }
        };
        Ok(RendezvousConfig {
            rank,
            size,
            root,
            timeout: timeout_from_env()?,
            node: node_name(hostname),
            secret: env("RMR_JOB_SECRET").unwrap_or_default().into_bytes(),
        })
    }

    /// A job of one process.
    pub fn single() -> Bootstrap {
        Bootstrap {
            kind: Kind::Single,
            rank: 0,
            size: 1,
            nodes: NodeMap::single_node(1),
            job: format!("single-{}", std::process::id()),
            why: "single process".into(),
            imp: Imp::Single,
        }
    }

    /// Joins a TCP rendezvous.
    ///
    /// # Errors
    /// [`Error::RanksMissing`] at the root (and [`Error::Aborted`] at the
    /// others) when a rank never shows up within `cfg.timeout`;
    /// [`Error::RootUnreachable`] when the root cannot be reached;
    /// [`Error::Io`] when the root cannot listen at its address.
    pub fn rendezvous(cfg: &RendezvousConfig) -> Result<Bootstrap> {
        let j = Rendezvous::join(cfg)?;
        Ok(Bootstrap {
            kind: Kind::Rendezvous,
            rank: cfg.rank,
            size: cfg.size,
            nodes: NodeMap::from_keys(&j.nodes),
            job: format!("rv-{:016x}", j.job),
            why: format!("rendezvous at {}", if cfg.size == 1 { "-" } else { &cfg.root }),
            imp: Imp::Rendezvous(j.rv),
        })
    }

    /// Joins the job of the PMIx launcher that started this process.
    ///
    /// # Errors
    /// [`Error::Unavailable`] in a build without the `pmix` feature;
    /// [`Error::Pmix`] when there is no PMIx server to talk to.
    #[cfg(feature = "pmix")]
    pub fn pmix() -> Result<Bootstrap> {
        let (p, info) = crate::pmix::Pmix::init()?;
        let node = node_name(|| info.hostname.clone().unwrap_or_else(hostname));
        let mut me = info.local_rank.to_le_bytes().to_vec();
        me.extend_from_slice(node.as_bytes());
        let all = p.allgather(info.size, &me)?;
        let mut keys = Vec::with_capacity(all.len());
        let mut local = Vec::with_capacity(all.len());
        for (r, a) in all.iter().enumerate() {
            if a.len() < 4 {
                return Err(Error::Protocol(format!("rank {r}'s placement is malformed")));
            }
            local.push(u32::from_le_bytes(a[..4].try_into().expect("4 bytes")));
            keys.push(String::from_utf8_lossy(&a[4..]).into_owned());
        }
        // RMR_NODE pretends other nodes: the launcher's local ranks no longer apply.
        let nodes = if env("RMR_NODE").is_some() {
            NodeMap::from_keys(&keys)
        } else {
            NodeMap::from_placement(&keys, &local)
        };
        Ok(Bootstrap {
            kind: Kind::Pmix,
            rank: info.rank,
            size: info.size,
            nodes,
            why: format!("pmix (namespace {})", info.nspace),
            job: format!("pmix-{}", info.nspace),
            imp: Imp::Pmix(Box::new(p)),
        })
    }

    /// Joins the job of the PMIx launcher that started this process.
    ///
    /// # Errors
    /// Always [`Error::Unavailable`]: this build lacks the `pmix` feature.
    #[cfg(not(feature = "pmix"))]
    pub fn pmix() -> Result<Bootstrap> {
        Err(Error::Unavailable {
            kind: "pmix",
            why: "rmr-boot was built without the `pmix` cargo feature (rebuild with \
                  `--features rmr-boot/pmix`, needs libpmix-dev), or use the rendezvous: \
                  RMR_RANK, RMR_SIZE, RMR_ROOT=host:port"
                .into(),
        })
    }

    /// The mechanism in use.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// One line saying which bootstrap runs and why it was chosen.
    pub fn describe(&self) -> &str {
        &self.why
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// Number of processes in the job.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// This process's rank among the job's processes on its node.
    pub fn local_rank(&self) -> usize {
        self.nodes.local_rank(self.rank())
    }

    /// Number of the job's processes on this node.
    pub fn local_size(&self) -> usize {
        self.nodes.ranks_on(self.nodes.node_of(self.rank())).len()
    }

    /// Where every rank runs.
    pub fn nodes(&self) -> &NodeMap {
        &self.nodes
    }

    /// A name unique to this job (for shared-memory files and the like).
    pub fn job_id(&self) -> &str {
        &self.job
    }

    /// Every rank's `data`, indexed by rank (this rank's included).
    ///
    /// # Errors
    /// [`Error::Timeout`], [`Error::PeerLost`], [`Error::Aborted`] (the
    /// rendezvous), [`Error::Pmix`] (PMIx).
    pub fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        match &self.imp {
            Imp::Single => Ok(vec![data.to_vec()]),
            Imp::Rendezvous(r) => r.allgather(data),
            #[cfg(feature = "pmix")]
            Imp::Pmix(p) => p.allgather(self.size, data),
        }
    }

    /// Waits until every rank called it (slow: an out-of-band exchange).
    ///
    /// # Errors
    /// As [`Bootstrap::allgather`].
    pub fn barrier(&self) -> Result<()> {
        self.allgather(&[]).map(drop)
    }
}

impl fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bootstrap")
            .field("kind", &self.kind)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("nodes", &self.nodes.num_nodes())
            .field("job", &self.job)
            .finish()
    }
}
