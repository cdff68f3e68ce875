//! The IA's progress helper: one thread per IA, however many endpoints it
//! has, which stands back while an application thread drives them (it
//! looks every couple of milliseconds whether the driver left, one timer
//! for all of them), costs no wake-up while they are idle, and ends once
//! the IA has no endpoint left (`rmr_api::provider::conformance::helper`).
//!
//! One test in its own binary: the counts and the thread list are the
//! process's.

use rmr_api::provider::conformance::helper::{HelperRig, helper_wakeups};

#[test]
fn one_helper_per_ia_asleep_while_idle_one_timer_while_driven_gone_when_unused() {
    backend_tcp::register();
    helper_wakeups(&HelperRig {
        spec: "tcp:127.0.0.1",
        remote: "127.0.0.1",
        service: 17960,
        // `rmr-tcp-127.0.0.1`, cut to 15 bytes.
        helper: "rmr-tcp-127.0.0",
        no_threads: Some("rmr-tcp-ep"),
        waits_per_extra: 10,
    });
}
