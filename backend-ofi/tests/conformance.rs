//! The rmr-api conformance suite against the libfabric backend, once per
//! provider of the system libfabric: `tcp` and `sockets`, over loopback.
//!
//! The `sockets` provider's progress thread costs milliseconds per transfer
//! on a small machine, so its heavy cases run scaled down (never below each
//! case's own minimum), with `FI_SOCKETS_PE_WAITTIME=0` set before libfabric
//! reads its parameters.

use rmr_api::provider::conformance::Target;

fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none() {
            // SAFETY: runs once, before this process makes any libfabric call (which is
            // what reads the variable); no other thread of the test reads the environment
            // concurrently in a way that matters (getenv of other names stays valid).
            unsafe { std::env::set_var("FI_SOCKETS_PE_WAITTIME", "0") };
        }
    });
    backend_ofi::register();
}

fn tcp() -> Target {
    Target::new("ofi-tcp", register, "ofi:tcp:127.0.0.1", "ofi:tcp:127.0.0.1")
}

fn sockets() -> Target {
    Target::new("ofi-sockets", register, "ofi:sockets:127.0.0.1", "ofi:sockets:127.0.0.1")
        .scaled(0.5)
}

mod conformance {
    mod tcp {
        rmr_api::provider::conformance_suite!(super::super::tcp);
    }
    mod sockets {
        rmr_api::provider::conformance_suite!(super::super::sockets);
    }
}
