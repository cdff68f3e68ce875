//! The rmr-api conformance suite against the verbs backend.
//!
//! Runs for real where an RDMA device exists, chosen by environment or by
//! discovery; prints `SKIPPED: no RDMA device (...)` in every case otherwise.
//!
//! - `RMR_TEST_VERBS_DEVICE=mlx5_0:1` (side a) and optionally
//!   `RMR_TEST_VERBS_DEVICE_B=mlx5_1:1` (side b, default: the same port);
//! - or `RMR_TEST_VERBS_ADDR=198.18.0.1` and optionally `RMR_TEST_VERBS_ADDR_B`;
//! - else the first address rdma_cm binds to a device port
//!   ([`backend_verbs::discover`]), used by both sides (loopback through the HCA).

use rmr_api::provider::conformance::Target;

fn spec_from_env(dev: &str, addr: &str) -> Option<String> {
    if let Ok(d) = std::env::var(dev) {
        return Some(format!("verbs:{d}"));
    }
    std::env::var(addr).ok().map(|a| format!("verbs:{a}"))
}

fn target() -> Target {
    let register = backend_verbs::register;
    if let Some(a) = spec_from_env("RMR_TEST_VERBS_DEVICE", "RMR_TEST_VERBS_ADDR") {
        // Chosen explicitly: a failure to open must fail, not skip.
        let b =
            spec_from_env("RMR_TEST_VERBS_DEVICE_B", "RMR_TEST_VERBS_ADDR_B").unwrap_or(a.clone());
        return Target::new("verbs", register, &a, &b);
    }
    match backend_verbs::discover() {
        Ok(specs) => Target::new("verbs", register, &specs[0], &specs[0]),
        Err(rmr_api::Error::NoDevice { what }) => {
            Target::unavailable("verbs", register, format!("no RDMA device ({what})"))
        }
        Err(e) => panic!("RDMA discovery failed: {e}"),
    }
}

mod conformance {
    rmr_api::provider::conformance_suite!(super::target);
}
