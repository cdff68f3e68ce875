//! The rmr-api conformance suite against the shm backend: two IAs of one
//! namespace (the killed-peer case runs its peer as a second process).

fn target() -> rmr_api::provider::conformance::Target {
    rmr_api::provider::conformance::Target::new(
        "shm",
        backend_shm::register,
        "shm:conf",
        "shm:conf",
    )
}

mod conformance {
    rmr_api::provider::conformance_suite!(super::target);
}
