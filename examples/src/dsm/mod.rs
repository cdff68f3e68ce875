//! A small Cluster-OpenMP-style runtime on rmr: one shared address space
//! across processes, release consistency with twins and diffs, a lock on
//! remote compare-and-swap, and `parallel_for` over rayon threads.
//!
//! - [`Dsm`]: the shared region, split into pages of [`PAGE`] bytes. Each
//!   page has a *home* process (pages are dealt out in blocks); every
//!   process registers the whole region once (one LMR) and keeps its home
//!   pages there; RMR contexts are exchanged through the bootstrap.
//! - Reading a page that lives elsewhere RDMA-reads it into a local copy;
//!   the first write to a copy keeps a *twin*; [`Dsm::barrier`] sends
//!   only the changed byte runs (the *diff* against the twin) to the
//!   page's home with RDMA writes, then drops every stale copy — TreadMarks'
//!   and Cluster OpenMP's release consistency, with explicit accessors
//!   instead of page faults.
//! - [`Dsm::lock`]: a spin lock on a word at rank 0, taken with remote
//!   compare-and-swap; [`Dsm::fetch_add`]: a shared counter.
//!
//! Everything goes through the public rmr API (`post_rdma_read`,
//! `post_rdma_write`, `post_cmp_swap`, `post_fetch_add`) plus rmr-boot (who
//! is who) and rmr-coll (the barrier), so it runs on any backend with
//! atomics — TCP, or a multirail EP over several rails.

mod mesh;
mod runtime;

pub mod heat;

pub use runtime::{Dsm, DsmConfig, Stats};

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
    /// A peer answered something unexpected.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// The runtime's result type.
pub type Result<T> = std::result::Result<T, DsmError>;
