//! The conformance suite again with every buffer in shared memory
//! (`MemRegion::shared`), so that every RDMA write and read, of any size,
//! is a copy through a mapping of the target's file: the checks, the
//! errors, the ordering rules and the dead peer on that path.

fn target() -> rmr_api::provider::conformance::Target {
    rmr_api::provider::conformance::Target::new(
        "shm (shared regions)",
        backend_shm::register,
        "shm:confshared",
        "shm:confshared",
    )
    .shared_regions()
}

mod conformance {
    rmr_api::provider::conformance_suite!(super::target);
}
