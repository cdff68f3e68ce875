//! The provider toolkit: what a backend author needs and an application
//! never does (libfabric's `prov/util` to rmr's backends).
//!
//! - [`Provider`], [`register`], [`provider`] and [`split_spec`]: the
//!   registry a backend joins so that [`crate::open`] finds it by name.
//! - [`SoftEvd`]: a software event queue with progress by the waiter
//!   ([`Driver`]s that a waiting thread runs itself, [`WaitOn`],
//!   [`Interest`]), doorbells ([`with_deferred_doorbell`],
//!   [`doorbell_deferred`]), the spin policy's CPU probe ([`cpus_idle`])
//!   and the [`Sink`] hook a layer above uses to take events as they come.
//! - [`io`]: moving bytes between sockets and registered memory through
//!   raw pointers, as DMA does (the only `unsafe` a socket transport needs).
//! - [`settings`]: a backend's settings from the environment, checked
//!   (a bad value is a typed error naming the variable), and listed with
//!   their sources.
//! - [`check_local_sges`] and [`completion_result`]: the checks and mappings
//!   every backend does the same way.
//! - `conformance` (feature `conformance`): the suite every backend's
//!   `tests/conformance.rs` runs, so "passes the suite" means one thing.
//!
//! Nothing here is needed to use rmr; everything here may change between
//! minor versions faster than the application API at the crate root.

mod checks;
mod cpus;
mod driver;
pub mod io;
pub use crate::settings;
mod soft_evd;

#[cfg(feature = "conformance")]
pub mod conformance;
/// Generates the conformance suite's tests (see [`conformance`]).
#[cfg(feature = "conformance")]
pub use crate::conformance_suite;

pub use crate::registry::{Provider, provider, register, split_spec};
pub use checks::{RemoteTarget, check_local_sges, completion_result};
pub use cpus::cpus_idle;
pub use driver::{Driver, Interest, WaitOn, doorbell_deferred, with_deferred_doorbell};
pub use soft_evd::{SPIN_KNOBS, Sink, SoftEvd, spin_settings, trace_event};

/// A fresh process-unique id for protection zones and other objects.
pub fn fresh_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
