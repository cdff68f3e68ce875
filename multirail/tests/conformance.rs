//! The rmr-api conformance suite against multirail endpoints over TCP rails
//! on loopback: two rails with the pinned engine, three with inline, two with
//! fork-join. Messages of 8 KiB and more are striped over every rail (a
//! threshold below the default 32 KiB, so that more of the suite stripes).

use rmr_api::provider::conformance::Target;

fn register() {
    backend_tcp::register();
    multirail::register();
}

fn spec(rails: usize, opts: &str) -> String {
    let r: Vec<String> = (1..=rails).map(|i| format!("tcp:127.0.0.{i}")).collect();
    format!("multirail:{};{opts}", r.join(","))
}

/// Stripes above 64 KiB go through the rail threads on any node (the
/// default keeps them with the caller where cores are scarce, as here).
fn two_pinned() -> Target {
    let s = spec(2, "engine=pinned;policy=even;threshold=8K;direct=64K");
    Target::new("multirail-2-pinned", register, &s, &s)
}

fn three_inline() -> Target {
    let s = spec(3, "engine=inline;policy=adaptive;threshold=8K");
    Target::new("multirail-3-inline", register, &s, &s)
}

fn two_fork_join() -> Target {
    let s = spec(2, "engine=fork-join;policy=weighted:3,1;threshold=8K");
    Target::new("multirail-2-fork-join", register, &s, &s)
}

mod conformance {
    mod two_rails_pinned {
        rmr_api::provider::conformance_suite!(crate::two_pinned);
    }
    mod three_rails_inline {
        rmr_api::provider::conformance_suite!(crate::three_inline);
    }
    mod two_rails_fork_join {
        rmr_api::provider::conformance_suite!(crate::two_fork_join);
    }
}
