//! The conformance suite again with cross-memory attach off (`cma=0`), so
//! that every RDMA write and read, however large, is copied through the
//! rings in fragments (the path a kernel that refuses cross-memory attach
//! leaves).

fn target() -> rmr_api::provider::conformance::Target {
    rmr_api::provider::conformance::Target::new(
        "shm (rings only)",
        backend_shm::register,
        "shm:confring;cma=0",
        "shm:confring;cma=0",
    )
}

mod conformance {
    rmr_api::provider::conformance_suite!(super::target);
}
