//! A Cluster-OpenMP-style distributed shared memory runtime on rmr: one
//! shared address space across the processes of a job, release
//! consistency with twins and diffs, typed shared arrays, `parallel for`,
//! reductions, and named locks with guards.
//!
//! ```no_run
//! use rmr_dsm::{Dsm, DsmConfig, ReduceOp};
//!
//! # fn main() -> rmr_dsm::Result<()> {
//! // Every process of the job (mpirun, or RMR_RANK / RMR_SIZE / RMR_ROOT / RMR_JOB_SECRET):
//! let dsm = Dsm::join(&DsmConfig::new("tcp:127.0.0.1", 1 << 20))?;
//! let v = dsm.alloc::<f64>(10_000)?;
//! // Each process fills its block of the range; the barrier at the end of
//! // `parallel_for` makes every write visible everywhere.
//! dsm.parallel_for(0..v.len(), |i| v.set(i, i as f64))?;
//! let mine: f64 = dsm.share(0..v.len()).map(|i| v.get(i).unwrap_or(0.0)).sum();
//! let total = dsm.reduce(ReduceOp::Sum, mine)?;
//! {
//!     let _g = dsm.lock("log")?; // released at the end of the block
//! }
//! # let _ = total; Ok(()) }
//! ```
//!
//! - **Pages and homes.** The region is split into pages of [`PAGE`]
//!   bytes; each has a *home* process (pages are dealt out in blocks, so a
//!   process's [`Dsm::share`] of an array mostly lives at home). Every
//!   process registers the whole region once per IA; RMR contexts are
//!   exchanged through the bootstrap.
//! - **Processes of one node over shared memory.** Page reads and diffs
//!   between processes of one node go through the `shm` backend
//!   (`rmr::node::Fabric`: shared-memory rings, cross-memory attach), the
//!   others through [`DsmConfig::spec`]'s IA; [`DsmConfig::shm`] turns it
//!   off.
//! - **Copies, twins, diffs.** Reading a page that lives elsewhere
//!   RDMA-reads it into a local copy (all pages an access spans at once);
//!   the first write to a copy keeps a *twin*; a release sends only the
//!   changed byte runs (the *diff* against the twin) home with RDMA writes,
//!   all in flight together — TreadMarks' and Cluster OpenMP's release
//!   consistency, with explicit accessors instead of page faults.
//! - **Release and acquire.** [`Dsm::barrier`] is release + barrier +
//!   acquire; [`Dsm::lock`] acquires (after sending this process's own
//!   writes home, so none is lost), dropping its [`LockGuard`] releases.
//! - **Atomics through one path.** Lock words and the counter live at rank
//!   0 and are only touched by the network backend's atomics — on rank 0
//!   through its loopback EP, from rank 0's node-mates too — never by a CPU
//!   atomic beside a NIC one.
//! - **Placement.** A process's block of a `parallel for` is fixed (a
//!   static schedule: its rows live in its home pages), so the job waits
//!   for the slowest block at every barrier. [`Bind::Auto`] (the default,
//!   [`DsmConfig::bind`], `RMR_DSM_BIND`) gives each of the job's
//!   processes on a node its share of the node's cores, as `mpirun
//!   --bind-to core` and OpenMP's `OMP_PROC_BIND` do, where there are
//!   enough; [`Dsm::binding`] says what it did.
//! - **Concurrency.** Many threads may access the region at once (rayon's
//!   workers in [`Dsm::parallel_for`]): completions are filed by cookie and
//!   no thread waits on the network for another's DTO. A page is locked
//!   across a network wait only while its own data is on the wire: its
//!   fetch (for the threads that need it), or its diff runs during a
//!   release (their source is its copy, which must not change meanwhile).
//!
//! Everything goes through the public rmr API (RDMA read and write,
//! compare-and-swap, fetch-and-add) plus rmr-boot (who is who) and
//! rmr-coll (the barrier), so it runs on any backend with atomics — TCP,
//! libfabric, verbs, or a multirail EP over several rails.

mod bind;
mod mesh;
mod omp;
mod runtime;
mod shared;
mod sync;

pub use bind::Bind;
pub use omp::{Reduce, ReduceOp};
pub use runtime::{Dsm, DsmConfig, Progress, Stats};
pub use shared::Shared;
pub use sync::LockGuard;

/// Bytes per shared page.
pub const PAGE: usize = 4096;

/// What can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum DsmError {
    /// A transport error.
    #[error("rmr: {0}")]
    Rmr(#[from] rmr::Error),
    /// The bootstrap failed.
    #[error("bootstrap: {0}")]
    Boot(#[from] rmr::boot::Error),
    /// The barrier failed.
    #[error("barrier: {0}")]
    Barrier(#[from] rmr::coll::Error),
    /// An address outside the shared region.
    #[error("address {addr}+{len} is outside the {size}-byte shared region")]
    OutOfRange {
        /// Start.
        addr: usize,
        /// Length.
        len: usize,
        /// Region size.
        size: usize,
    },
    /// Elements outside a [`Shared`] array.
    #[error("elements {start}..{start}+{len} are outside an array of {elements}")]
    OutOfBounds {
        /// First element asked for.
        start: usize,
        /// Elements asked for.
        len: usize,
        /// The array's length.
        elements: usize,
    },
    /// [`Dsm::alloc`] found no room in the region.
    #[error(
        "the shared region has {left} bytes left, {wanted} were asked for (raise DsmConfig::bytes)"
    )]
    OutOfSpace {
        /// Bytes asked for.
        wanted: usize,
        /// Bytes left.
        left: usize,
    },
    /// A peer answered something unexpected.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A setting the runtime cannot take (an environment variable's value).
    #[error("setting: {0}")]
    Config(String),
    /// An earlier barrier, lock or release of this process failed (the
    /// reason given): it takes part in no more of the job's
    /// synchronisation, as its writes may not have reached their homes or
    /// its copies may be stale (see [`Dsm::barrier`]).
    #[error("an earlier synchronisation of this process failed ({0}); it takes part in no more")]
    Failed(String),
    /// [`Dsm::lock`] of a name this thread holds already (a lock is not
    /// reentrant: it would wait for itself).
    #[error("lock {0:?} is held by this thread already")]
    AlreadyHeld(String),
}

/// The runtime's result type.
pub type Result<T> = std::result::Result<T, DsmError>;
