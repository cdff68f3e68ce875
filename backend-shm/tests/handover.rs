//! A process that computes between its waits answers RDMA reads while it
//! computes: when its thread leaves a wait, the IA's progress helper takes
//! the endpoint over (the leaving thread tells it, or its quick looks after
//! an earlier takeover find the endpoint left). The IAs here look at driven
//! endpoints only every 60 s (`watch_ms`), longer than the test's bound, so
//! only that handover can answer the read in time. Cross-memory attach is
//! off (`cma=0`): the read goes through the rings, so the target's side
//! must answer it.

fn target() -> rmr_api::provider::conformance::Target {
    rmr_api::provider::conformance::Target::new(
        "shm",
        backend_shm::register,
        "shm:handover;watch_ms=60000;cma=0",
        "shm:handover;watch_ms=60000;cma=0",
    )
}

#[test]
fn a_read_is_answered_while_the_target_computes() {
    rmr_api::provider::conformance::read_while_target_computes_rounds(&target());
}
