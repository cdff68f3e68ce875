//! The rmr-api conformance suite against the TCP backend over loopback.

fn target() -> rmr_api::provider::conformance::Target {
    rmr_api::provider::conformance::Target::new(
        "tcp",
        backend_tcp::register,
        "tcp:127.0.0.1",
        "tcp:127.0.0.1",
    )
}

mod conformance {
    rmr_api::provider::conformance_suite!(super::target);
}
