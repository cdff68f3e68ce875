//! [`Barrier`]: the node's shared-memory flat tree, then the schedule
//! among the nodes' masters over rmr endpoints.

use crate::Result;
use crate::links::Links;
use crate::schedule::{Step, partners, steps};
use crate::shm::{NodeTree, ShmWords};
use crate::signals::{MsgSignals, RdmaSignals, Signals, Slots, run};
use crate::wait::Waiter;
use rmr_api::{Evd, Ia, Pz};
use rmr_boot::Bootstrap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How the processes of different nodes signal each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// RDMA-write the sequence number into the partner's slot (Gupta et al.).
    Rdma,
    /// Send the sequence number (the baseline: same schedule, two-sided).
    SendRecv,
}

impl Algo {
    /// `rdma` or `sendrecv`.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Rdma => "rdma",
            Algo::SendRecv => "sendrecv",
        }
    }

    /// Parses [`Algo::name`]'s output.
    pub fn parse(s: &str) -> Option<Algo> {
        match s {
            "rdma" => Some(Algo::Rdma),
            "sendrecv" | "send-recv" | "msg" => Some(Algo::SendRecv),
            _ => None,
        }
    }
}

/// Settings of a [`Barrier`]; every rank must use the same.
#[derive(Clone, Debug)]
pub struct BarrierConfig {
    /// How nodes signal each other.
    pub algo: Algo,
    /// Meet in shared memory inside a node first (one flat tree per node,
    /// its master alone takes part across nodes). Off: every process takes
    /// part in the schedule over endpoints, local ones too.
    pub shm: bool,
    /// Limit of any one wait (a dead peer is an error after this long).
    pub timeout: Duration,
    /// How long a wait spins before it sleeps: on a TCP-backend EVD
    /// before it blocks in `poll(2)`, and in the node's shared memory
    /// before it sleeps in `futex(2)`. `None` (the default): when the node
    /// has a core per local process, the EVD's own spin (`RMR_EVD_SPIN_US`,
    /// 50 µs) and 1 ms in shared memory (a wake-up out of `futex(2)` costs
    /// tens of microseconds on a virtual machine, paid by the whole node);
    /// when it is oversubscribed, no spin on the EVD and a few hundred
    /// looks in shared memory (a spinning waiter takes the core its partner
    /// needs to answer). "A core per local process" counts the machine's
    /// online CPUs, once, when the barrier is made (as an OpenMP runtime
    /// decides its active wait); the EVD's spin also stops while the
    /// machine has more runnable threads than CPUs. A value given here
    /// replaces both defaults; a wait's spin never outlasts `timeout`, and
    /// in shared memory a wait always looks a few hundred times first.
    pub spin: Option<Duration>,
}

impl Default for BarrierConfig {
    fn default() -> Self {
        BarrierConfig { algo: Algo::Rdma, shm: true, timeout: Duration::from_secs(60), spin: None }
    }
}

/// A barrier among every process of a [`Bootstrap`]'s job.
///
/// [`Barrier::wait`] returns only after every process called it as often.
/// Consecutive calls are told apart by a sequence number, so they may
/// follow each other back to back.
pub struct Barrier {
    seq: u64,
    algo: Algo,
    tree: Option<NodeTree>,
    members: usize,
    inter: Option<(Vec<Step>, Box<dyn Signals>)>,
    _keep: Option<(Arc<dyn Pz>, Arc<dyn Evd>)>,
}

fn shm_dir() -> PathBuf {
    let d = PathBuf::from("/dev/shm");
    if d.is_dir() { d } else { std::env::temp_dir() }
}

impl Barrier {
    /// Sets the barrier up: a collective over every rank of `boot`, which
    /// opens endpoints on `ia` (any backend, or a multirail IA) to the
    /// ranks the schedule pairs this one with.
    ///
    /// # Errors
    /// Bootstrap errors, endpoint errors (connect, register), and
    /// [`Error::Shm`](crate::Error::Shm) when the node's shared-memory file cannot be made.
    pub fn new(boot: &Bootstrap, ia: &Arc<dyn Ia>, cfg: &BarrierConfig) -> Result<Barrier> {
        let nodes = boot.nodes();
        let (rank, lrank, lsize) = (boot.rank(), boot.local_rank(), boot.local_size());
        // The machine's CPUs, not this process's affinity: ranks pinned one
        // per core still have a core each.
        let cores = rmr_api::provider::online_cpus();
        let mut tree = None;
        if cfg.shm {
            let node = nodes.node_of(rank);
            let path = shm_dir().join(format!("rmr-coll-{}-node{node}", boot.job_id()));
            let words = crate::shm::tree_words(lsize);
            let created =
                if lsize > 1 && lrank == 0 { Some(ShmWords::create(&path, words)?) } else { None };
            boot.barrier()?;
            let shm = match created {
                Some(s) => Some(s),
                None if lsize > 1 => Some(ShmWords::open(&path, words)?),
                None => None,
            };
            boot.barrier()?;
            if let Some(s) = shm {
                if lrank == 0 {
                    // Everybody mapped it: the name can go (no leftovers after a crash).
                    s.unlink()?;
                }
                let spin = cfg.spin.unwrap_or(if lsize > cores {
                    Duration::ZERO
                } else {
                    crate::shm::NODE_SPIN
                });
                tree = Some(NodeTree::new(s, lrank, lsize, cfg.timeout, spin));
            }
        }
        let member_ranks: Vec<usize> =
            if cfg.shm { nodes.masters() } else { (0..boot.size()).collect() };
        let n = member_ranks.len();
        let mut inter = None;
        let mut keep = None;
        if n > 1 {
            let pz = ia.create_pz()?;
            let evd = ia.create_evd()?;
            let slots = match cfg.algo {
                Algo::Rdma => Some(Slots::new(&pz, n)?),
                Algo::SendRecv => None,
            };
            let extra = slots.as_ref().map_or(Vec::new(), |s| s.ctx.to_bytes().to_vec());
            let links = Links::connect(
                boot,
                ia,
                &pz,
                &evd,
                &member_ranks,
                &|me| partners(n, me),
                &extra,
                cfg.timeout,
            )?;
            if let Some(links) = links {
                let me = links.me;
                let spin = cfg.spin.or((lsize > cores).then_some(Duration::ZERO));
                let waiter = Waiter::new(evd.clone(), cfg.timeout, spin);
                let sig: Box<dyn Signals> = match slots {
                    Some(slots) => Box::new(RdmaSignals::new(links, waiter, &pz, slots)?),
                    None => Box::new(MsgSignals::new(links, waiter, &pz)?),
                };
                inter = Some((steps(n, me), sig));
            }
            keep = Some((pz, evd));
            // Every receive is posted before anybody's first signal.
            boot.barrier()?;
        }
        Ok(Barrier { seq: 0, algo: cfg.algo, tree, members: n, inter, _keep: keep })
    }

    /// Waits until every process of the job entered this barrier.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when a peer's signal does not come within the
    /// configured limit; [`Error::Link`](crate::Error::Link) when an endpoint breaks.
    pub fn wait(&mut self) -> Result<()> {
        self.seq += 1;
        let seq = self.seq;
        let _epoch = tracing::trace_span!(target: "rmr::coll", "barrier", epoch = seq).entered();
        if let Some(t) = &self.tree {
            if !t.is_master() {
                return t.arrive_and_wait(seq);
            }
            t.gather(seq)?;
        }
        if let Some((steps, sig)) = &mut self.inter {
            run(steps, sig.as_mut(), seq)?;
        }
        if let Some(t) = &self.tree {
            t.release(seq);
        }
        Ok(())
    }

    /// Barriers completed (or started) so far: the last sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The algorithm across nodes.
    pub fn algo(&self) -> Algo {
        self.algo
    }

    /// Processes that take part across nodes (node masters with shared
    /// memory on, every process without).
    pub fn members(&self) -> usize {
        self.members
    }

    /// Rounds of the schedule across nodes (`log2 n`, `+ 2` when folding).
    pub fn rounds(&self) -> usize {
        crate::schedule::rounds(self.members)
    }
}

impl std::fmt::Debug for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Barrier")
            .field("seq", &self.seq)
            .field("algo", &self.algo)
            .field("shm", &self.tree.is_some())
            .field("members", &self.members)
            .finish()
    }
}

// `Barrier` moves between threads (documented in the crate docs).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Barrier>();
};
