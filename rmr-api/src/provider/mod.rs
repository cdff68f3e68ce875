//! The provider toolkit: what a backend author needs and an application
//! never does (libfabric's `prov/util` to rmr's backends).
//!
//! - [`Provider`], [`register`], [`provider`] and [`split_spec`]: the
//!   registry a backend joins so that [`crate::open`] finds it by name.
//! - [`SoftEvd`]: a software event queue with progress by the waiter
//!   ([`Driver`]s that a waiting thread runs itself, [`WaitOn`],
//!   [`Interest`]), doorbells ([`with_deferred_doorbell`],
//!   [`doorbell_deferred`]), the spin policy's CPU probes ([`cpus_idle`],
//!   [`online_cpus`]) and the [`Sink`] hook a layer above uses to take
//!   events as they come; [`clock`], stamps in plain nanoseconds.
//! - [`Handover`]: when a backend's progress helper takes an endpoint over
//!   from threads that compute between their waits ([`QuickLook`],
//!   [`FAST_LOOKS`], with [`short_slices`] and [`yield_to_helper`]).
//! - [`io`]: moving bytes between sockets and registered memory through
//!   raw pointers, as DMA does (the only `unsafe` a socket transport needs).
//! - [`settings`]: a backend's settings from the environment, checked
//!   (a bad value is a typed error naming the variable), and listed with
//!   their sources.
//! - [`check_local_sges`] and [`completion_result`]: the checks and mappings
//!   every backend does the same way; [`check_and_place`], the post's
//!   segment checks and each segment's place ([`seg_place`]) in one pass,
//!   reading a backend's own LMRs field by field ([`LmrFacts`]).
//! - [`with_rail_share`] / [`rail_share`]: a layer that opens several IAs as
//!   rails of one (multirail) tells them how many share the node's
//!   resources, so their per-connection defaults can be sized for the sum.
//! - `conformance` (feature `conformance`): the suite every backend's
//!   `tests/conformance.rs` runs, so "passes the suite" means one thing.
//!
//! Nothing here is needed to use rmr; everything here may change between
//! minor versions faster than the application API at the crate root.

mod checks;
pub mod clock;
mod cpus;
mod driver;
mod handover;
pub mod io;
pub use crate::settings;
mod soft_evd;

#[cfg(feature = "conformance")]
pub mod conformance;
/// Generates the conformance suite's tests (see [`conformance`]).
#[cfg(feature = "conformance")]
pub use crate::conformance_suite;

pub use crate::memory::{copy_from_mapped, copy_in, copy_out, copy_to_mapped, place};
pub use crate::registry::{Provider, provider, register, split_spec};
pub use checks::{
    LmrFacts, LmrRecord, Places, RemoteTarget, check_and_place, check_local_sges,
    completion_result, seg_place,
};
pub use cpus::{SHORT_SLICE_NS, cpus_idle, online_cpus, short_slices, yield_to_helper};
pub use driver::{Driver, Interest, WaitOn, doorbell_deferred, with_deferred_doorbell};
pub use handover::{FAST_LOOKS, Handover, LONG_WAIT_NS, QuickLook};
pub use soft_evd::{SPIN_KNOBS, Sink, SoftEvd, spin_settings, trace_event};

/// Collects `items` into a small vector by pushing them one at a time.
/// For the one to four items of a hot path's segment or driver list,
/// `SmallVec`'s own `collect` (its `Extend`) costs several times as much
/// (~80 instructions against a few): backends' post and wait paths use
/// this instead.
#[inline]
pub fn small_vec<A: smallvec::Array>(
    items: impl IntoIterator<Item = A::Item>,
) -> smallvec::SmallVec<A> {
    let mut v = smallvec::SmallVec::new();
    for x in items {
        v.push(x);
    }
    v
}

thread_local! {
    static RAIL_SHARE: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
}

/// Runs `open` (which opens an IA) as the opening of one of `rails` IAs
/// that a layer above drives at once, as rails of one: a backend reading
/// [`rail_share`] while it opens sizes its per-connection defaults to a
/// share of what one IA alone would take (the tcp backend: its near send
/// buffer). Settings given explicitly are not divided.
/// A share nested in another replaces it for the inner call.
pub fn with_rail_share<R>(rails: usize, open: impl FnOnce() -> R) -> R {
    /// Puts the outer share back however `open` leaves (a panic too).
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            RAIL_SHARE.set(self.0);
        }
    }
    let _restore = Restore(RAIL_SHARE.replace(rails.max(1)));
    open()
}

/// How many rails the IA being opened on this thread shares the node with
/// (itself included): 1 unless a layer opens it within [`with_rail_share`].
pub fn rail_share() -> usize {
    RAIL_SHARE.get()
}

/// A fresh process-unique id for protection zones and other objects.
pub fn fresh_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod rail_share_tests {
    use super::*;

    #[test]
    fn a_rail_share_holds_only_inside_its_scope_and_nests() {
        assert_eq!(rail_share(), 1);
        let inner = with_rail_share(3, || (rail_share(), with_rail_share(0, rail_share)));
        assert_eq!(inner, (3, 1), "the share inside, and 0 taken as 1");
        assert_eq!(rail_share(), 1);
        let caught = std::panic::catch_unwind(|| with_rail_share(2, || panic!("open failed")));
        assert!(caught.is_err());
        assert_eq!(rail_share(), 1, "a panicking open leaves no share behind");
    }
}
