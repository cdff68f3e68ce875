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
    rmr_api::provider::conformance::read_while_target_computes_rounds(&target());
}
