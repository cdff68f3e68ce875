//! # rmr-boot — how N rmr processes find each other
//!
//! Before processes can connect rmr endpoints they must know their rank,
//! the job's size, which ranks share their node, and each other's
//! endpoint addresses. [`Bootstrap`] gives exactly that, from whichever
//! launcher started the job:
//!
//! - **PMIx** (feature `pmix`): under Open MPI's `mpirun` or Slurm's
//!   `srun --mpi=pmix`. Rank, size and node-local rank come from the
//!   launcher's PMIx server; [`Bootstrap::allgather`] is
//!   `PMIx_Put` + `PMIx_Commit` + `PMIx_Fence` (collecting data) + `PMIx_Get`.
//! - **TCP rendezvous**, with no launcher: every process is given
//!   `RMR_RANK`, `RMR_SIZE`, `RMR_ROOT=host:port` and the job's secret
//!   `RMR_JOB_SECRET`; rank 0 listens there and the others connect, each
//!   side proving it holds the secret (it never travels), so only the
//!   job's processes get in. A rank that never shows up is a typed error
//!   ([`Error::RanksMissing`] at the root, [`Error::Aborted`] at the others)
//!   after `RMR_BOOT_TIMEOUT_S` (30) seconds, not a hang.
//! - **Single** process, when neither is present.
//!
//! [`Bootstrap::from_env`] picks one and says which ([`Bootstrap::kind`],
//! [`Bootstrap::describe`]).
//!
//! ## Quick start
//! ```
//! # fn main() -> rmr_boot::Result<()> {
//! let boot = rmr_boot::Bootstrap::from_env()?;
//! println!("rank {} of {} ({})", boot.rank(), boot.size(), boot.describe());
//! // Exchange endpoint addresses: every rank's bytes, by rank.
//! let addrs = boot.allgather(format!("127.0.0.1:{}", 7000 + boot.rank()).as_bytes())?;
//! assert_eq!(addrs.len(), boot.size());
//! # Ok(()) }
//! ```
//!
//! Start it as `mpirun -np 4 prog` (built with `--features pmix`), or
//! without a launcher:
//! ```sh
//! export RMR_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
//! for r in 0 1 2 3; do RMR_RANK=$r RMR_SIZE=4 RMR_ROOT=127.0.0.1:7400 prog & done; wait
//! ```
//!
//! ## Environment
//! | variable | meaning |
//! | --- | --- |
//! | `RMR_BOOT` | `pmix`, `rendezvous` or `single`: force a bootstrap |
//! | `RMR_RANK`, `RMR_SIZE`, `RMR_ROOT` | the rendezvous: this rank, the job size, rank 0's `host:port` |
//! | `RMR_JOB_SECRET` | the rendezvous: the job's secret (at least 16 bytes, the same at every rank; [`fresh_secret`] makes one); required for 2 or more processes |
//! | `RMR_BOOT_TIMEOUT_S` | limit for joining and each collective (30) |
//! | `RMR_NODE` | node name (default: the host name, or PMIx's); processes with equal names share memory — set different ones to pretend several nodes on one machine |
//!
//! ## Thread safety
//! A [`Bootstrap`] is `Send + Sync`; its collectives are serialised
//! internally, and every rank must call them in the same order.
//!
//! ## Resource cleanup
//! Dropping a [`Bootstrap`] closes the rendezvous connections or finalises
//! PMIx.
//!
//! ## Cargo features
//! - `pmix`: the PMIx bootstrap, bound to the system libpmix (>= 4; Debian
//!   `libpmix-dev`) by bindgen at build time (needs libclang). Without it
//!   [`Bootstrap::pmix`] is an [`Error::Unavailable`] error.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod bootstrap;
mod error;
mod nodes;
#[cfg(feature = "pmix")]
mod pmix;
#[cfg(feature = "pmix")]
mod pmix_sys;
mod rendezvous;
mod wire;

/// True when this build has the `pmix` feature (so [`Bootstrap::pmix`] can work).
pub const PMIX_BUILT: bool = cfg!(feature = "pmix");

pub use bootstrap::{Bootstrap, DEFAULT_TIMEOUT, Kind, hostname};
pub use error::{Error, Result};
pub use nodes::NodeMap;
pub use rendezvous::{MIN_SECRET, RendezvousConfig, fresh_secret};
