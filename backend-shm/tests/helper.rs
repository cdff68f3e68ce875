//! The IA's progress helper: one thread per IA, asleep while its endpoints
//! are idle, and not woken at every wait of a thread that polls in waits.
//! After the helper took an endpoint over it looks at it soon again, so
//! that a thread that computes between its waits hands it over at once
//! (tests/handover.rs); a thread that comes straight back instead, twice
//! in a row, ends those quick looks, and the helper then looks once every
//! `watch` (`rmr_api::provider::conformance::helper`).
//!
//! One test in its own binary: the counts and the thread list are the
//! process's.

use rmr_api::provider::conformance::helper::{HelperRig, helper_wakeups};

#[test]
fn the_helper_sleeps_while_idle_and_is_not_woken_at_every_wait_of_a_polling_thread() {
    backend_shm::register();
    // The default watch (2 ms).
    let name = format!("helper{}", std::process::id());
    helper_wakeups(&HelperRig {
        spec: &format!("shm:{name}"),
        remote: &name,
        service: 30_000 + (std::process::id() % 20_000) as u16,
        helper: "rmr-shm-helper",
        no_threads: None,
        waits_per_extra: 6,
    });
}
