//! # backend-shm — rmr between processes of one node
//!
//! The `shm` provider: endpoints between processes on the same node, with
//! no network stack on the data path.
//!
//! - **Set-up** goes over a Unix-domain socket in the abstract namespace
//!   (`rmr-shm/<uid>/<name>/<service>`): private data, and, as file
//!   descriptors, a memfd holding the connection's two rings, each side's
//!   doorbell (an eventfd) and each side's region table. The socket stays
//!   open only so that each side learns when the other is gone.
//! - **Messages and small DTOs** go through a single-producer,
//!   single-consumer ring per direction ([`wire`] frames; head, tail and
//!   wake flags on their own cache lines). A waiting thread polls the ring
//!   itself, spins, then sleeps on its doorbell (the software EVDs'
//!   spin-then-sleep policy, and a descriptor for event loops); the peer
//!   rings a doorbell only when its owner said it sleeps.
//! - **RDMA writes and reads** of at least `cma_min` bytes go straight
//!   between the two processes' registered memory by cross-memory attach
//!   (`process_vm_writev`/`process_vm_readv`): the target's CPU takes no
//!   part. The initiator first checks the key, bounds, rights and
//!   protection zone against the region table the target publishes
//!   read-only in shared memory, so the errors are those of every backend.
//!   A cross-memory access never overtakes a ring request to the target's
//!   memory posted before it. Where the kernel refuses cross-memory attach
//!   (`kernel.yama.ptrace_scope`), or with `cma=0`, they are copied through
//!   the rings; [`ShmEp::mode`] and the EP's `notes` say which.
//! - **Shared regions** ([`rmr_api::MemRegion::shared`], memory in a sealed
//!   memfd): an RDMA write or read of one, of any size, is a copy through
//!   a mapping of the target's file (atomic, as the region's own accessors
//!   copy: the target's threads may touch those bytes at any time), at
//!   `memcpy` speed from 128 bytes on, with the
//!   same checks (where cross-memory attach would be allowed, and not for
//!   a write with immediate or behind ring requests to the target's memory
//!   not yet answered, which go through the rings). The initiator fetches
//!   the file's descriptor from the target with `pidfd_getfd` and maps it
//!   only if it is the file the table names, a sealed memfd open for
//!   writing, and none of this process's rings or tables. Allocate the
//!   regions that processes of one node exchange data through this way
//!   (`map=0` turns it off; the EP's `shared_files_mapped` note counts the
//!   files mapped, or says why none can be).
//! - **Atomics** always execute at the target, in its progress, with CPU
//!   atomics on the word: one path per word.
//! - **Trust**: the boundary is the user id, as for cross-memory attach in
//!   Open MPI and UCX (a process of the same user could ptrace the other
//!   anyway). The checks stop honest mistakes; a peer that corrupts a ring
//!   meets a typed protocol error and a broken connection, never a write
//!   outside a region this side registered.
//!
//! ## Map
//! The modules in reading order (each uses only those above it):
//! - `config`: [`ShmConfig`], the IA's settings.
//! - `helper`: the IA's progress thread, for endpoints nobody drives.
//! - `sys`: the `unsafe` contact with the kernel: shared mappings and
//!   cross-memory attach.
//! - `table`: the region table an IA publishes to its peers.
//! - `domain`: what an IA's objects share, [`ShmPz`], [`ShmLmr`].
//! - [`wire`]: the frame format.
//! - `ring`: the single-producer, single-consumer ring of frames.
//! - `ep`: [`ShmEp`], in files by concern (`shared`, `post`, `rx`, `conn`).
//! - `psp`: [`ShmPsp`], listening and the set-up exchange.
//! - `ia`: [`ShmIa`], the factory of everything above.
//!
//! ## Spec
//! `shm:` or `shm:<name>` (default name `local`), then options after `;`:
//! `shm:local;cma=0`. Processes that open the same name reach each
//! other's service points.
//!
//! ## Settings
//! See [`ShmConfig`]: `cma`, `cma_min`, `ring`, `max_dtos`, `max_recvs`,
//! `rnr_timeout_ms`, `map` (variables `RMR_SHM_*`), plus the software EVDs'
//! `RMR_EVD_SPIN_US` / `RMR_EVD_SPIN_MAX_US`.
#![deny(missing_docs)]

mod config;
mod domain;
mod ep;
mod helper;
#[doc(hidden)]
pub mod hostile;
mod ia;
mod psp;
mod ring;
mod sys;
mod table;
pub mod wire;

pub use config::{KNOBS, ShmConfig, ShmConfigBuilder};
pub use domain::{ShmLmr, ShmPz};
pub use ep::ShmEp;
pub use ia::{MAX_MSG, ShmIa};
pub use psp::ShmPsp;

use rmr_api::provider::Provider;
use rmr_api::settings::Given;
use rmr_api::{Ia, Result};
use std::sync::Arc;

/// The `shm` provider.
pub struct ShmProvider;

impl Provider for ShmProvider {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn describe(&self) -> &'static str {
        "processes of one node: shared-memory rings, RDMA by cross-memory attach"
    }

    fn open(&self, rest: &str) -> Result<Arc<dyn Ia>> {
        let (name, given) = Given::split("shm", rest, &config::KNOBS)?;
        let name = if name.is_empty() { "local" } else { name };
        Ok(Arc::new(ShmIa::with_config(name, ShmConfig::from_given(&given)?)?))
    }

    fn settings(&self, rest: &str) -> Result<Vec<rmr_api::settings::Setting>> {
        let (_, given) = Given::split("shm", rest, &config::KNOBS)?;
        ShmConfig::settings(&given)
    }
}

/// Registers the `shm` provider with [`rmr_api::provider::register`].
pub fn register() {
    rmr_api::provider::register(Arc::new(ShmProvider));
}
