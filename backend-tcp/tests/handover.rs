//! A process that computes between its waits answers RDMA reads while it
//! computes: when its thread leaves a wait, the IA's progress helper takes
//! the endpoint over (the leaving thread tells it, or its quick looks after
//! an earlier takeover find the endpoint left). The IAs here look at driven
//! endpoints only every 60 s (`watch_ms`), longer than the test's bound, so
//! only that handover can answer the read in time.

fn target() -> rmr_api::provider::conformance::Target {
    rmr_api::provider::conformance::Target::new(
        "tcp",
        backend_tcp::register,
        "tcp:127.0.0.1;watch_ms=60000",
        "tcp:127.0.0.1;watch_ms=60000",
    )
}

#[test]
fn a_read_is_answered_while_the_target_computes() {
    let p = rmr_api::provider::conformance::Pair::new(&target());
    // Short and long waits before the computing, twice each: after the
    // first, the helper had taken the endpoint over and given it back to
    // the waiting thread. A long wait's end tells the helper; after a
    // short one, its quick look finds the endpoint left.
    for delay in [0, 3, 0, 3] {
        let delay = std::time::Duration::from_millis(delay);
        rmr_api::provider::conformance::read_while_target_computes(&p, delay);
    }
}
