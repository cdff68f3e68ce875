//! # rmr-coll — collectives over rmr endpoints: the RDMA barrier
//!
//! A barrier for N processes after Gupta et al. ("Efficient barrier using
//! remote memory operations on VIA-based clusters"):
//!
//! - every process registers one **slot per peer**; a barrier step
//!   RDMA-writes the caller's **barrier sequence number** into the
//!   partner's slot, and the partner polls its own memory for a value
//!   `>=` the number it expects, so back-to-back barriers never confuse
//!   each other;
//! - **pairwise exchange with recursive doubling** for a power of two;
//!   other sizes fold the extra processes into the power-of-two set first
//!   and release them last (`log2 N + 2` rounds) — see [`schedule`], a pure
//!   function checked for every N up to 64;
//! - processes of one **node** first meet in a shared-memory **flat tree**
//!   (one flag per process on its own cache line in a `/dev/shm` file; the
//!   node master waits for all, runs the barrier across nodes, releases
//!   them);
//! - the same schedule over **send/recv** ([`Algo::SendRecv`]) is the
//!   baseline it is measured against (`rmr-bench barrier`).
//!
//! It runs over any rmr-api IA — `tcp`, `ofi`, `verbs`, `multirail` —
//! because it uses only the traits (`post_rdma_write`, `post_send`,
//! `post_recv`, EVDs).
//!
//! ## Quick start
//! ```no_run
//! use rmr_coll::{Barrier, BarrierConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! backend_tcp::register();
//! let boot = rmr_boot::Bootstrap::from_env()?; // mpirun, or RMR_RANK/RMR_SIZE/RMR_ROOT/RMR_JOB_SECRET
//! let ia = rmr_api::open("tcp:127.0.0.1")?;
//! let mut barrier = Barrier::new(&boot, &ia, &BarrierConfig::default())?;
//! for _ in 0..1000 {
//!     barrier.wait()?; // nobody gets past until all arrived
//! }
//! # Ok(()) }
//! ```
//!
//! ## Why here, not in rmr-api
//! The design puts "collectives built only on the traits" beside the API.
//! The barrier's steps are exactly that, but a usable barrier needs two
//! more things rmr-api should not carry: the job's layout and an
//! out-of-band exchange of addresses (the bootstrap, [`rmr_boot`], with
//! its optional PMIx binding), and a node's shared memory (a file mapping,
//! with `unsafe`). So the algorithm lives in this crate, on top of
//! rmr-api and rmr-boot, and rmr-api stays free of launchers and mappings.
//!
//! ## Progress and oversubscription
//! A process waiting for a flag must make its endpoints progress, or on
//! the TCP backend the write lands only after a hand-off to the endpoint's
//! progress thread. Waits go through the EVD's public progress wait
//! ([`rmr_api::Evd::progress_until`]): on a TCP EVD they drive the endpoints'
//! sockets themselves, blocking in
//! `poll(2)` after a short spin; other EVDs are polled with
//! [`rmr_api::Evd::dequeue`], spinning, then yielding, then sleeping with
//! a growing backoff, so more processes than cores still finish quickly.
//! Inside a node, the shared-memory tree spins (1 ms where every local
//! process has a core, a few hundred looks on an oversubscribed node:
//! [`BarrierConfig::spin`]), then sleeps in `futex(2)` until it is woken.
//!
//! ## Thread safety
//! A [`Barrier`] belongs to one thread of its process (`wait` takes
//! `&mut self`); it is `Send`.
//!
//! ## Resource cleanup
//! Dropping a [`Barrier`] closes its endpoints. The shared-memory file is
//! unlinked as soon as every local process has mapped it, so nothing is
//! left in `/dev/shm` even after a crash.
//!
//! ## Cargo features
//! - `pmix`: [`rmr_boot::Bootstrap::from_env`] can join PMIx launchers
//!   (`mpirun`, `srun --mpi=pmix`); needs libpmix-dev.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod barrier;
mod error;
mod links;
pub mod schedule;
mod shm;
mod signals;
mod wait;

pub use barrier::{Algo, Barrier, BarrierConfig};
pub use error::{Error, Result};
pub use shm::{ShmWords, WORD_STRIDE};
