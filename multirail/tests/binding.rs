//! The pinned engine binds one thread per rail to a core with hwloc and
//! reports the binding in the EP's attributes (`rail<i>.cpu`).

use rmr_api::conformance::{Pair, Target};
use std::time::{Duration, Instant};

fn register() {
    backend_tcp::register();
    multirail::register();
}

#[test]
fn pinned_rail_threads_are_bound_and_reported() {
    let spec = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;policy=even;bind=1";
    let p = Pair::new(&Target::new("multirail-2-pinned", register, spec, spec));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Rail threads bind themselves as they start; give them a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let notes = loop {
        let notes = p.a.attr().notes;
        let cpu: Vec<String> = (0..2)
            .filter_map(|i| notes.iter().find(|(k, _)| *k == format!("rail{i}.cpu")))
            .map(|(_, v)| v.clone())
            .collect();
        if cpu.len() == 2 && cpu.iter().all(|c| c != "not started") || Instant::now() > deadline {
            break notes;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let engine = notes.iter().find(|(k, _)| k == "engine").map(|(_, v)| v.as_str());
    assert_eq!(engine, Some("pinned"));
    let cpu: Vec<String> = (0..2)
        .map(|i| {
            notes
                .iter()
                .find(|(k, _)| *k == format!("rail{i}.cpu"))
                .map(|(_, v)| v.clone())
                .expect("rail binding reported")
        })
        .collect();
    // Rail i goes to core i mod cores, as hwloc numbers them.
    assert!(cpu[0].starts_with("core 0 "), "rail 0 bound as `{}`", cpu[0]);
    assert!(cpu[1].starts_with("core "), "rail 1 bound as `{}`", cpu[1]);
    if cores >= 2 {
        assert_ne!(cpu[0], cpu[1], "two rails on one core with {cores} cpus");
    }
}

#[test]
fn binding_can_be_switched_off() {
    let spec = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;bind=0";
    let p = Pair::new(&Target::new("multirail-2-unbound", register, spec, spec));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let notes = p.a.attr().notes;
        let cpu = notes.iter().find(|(k, _)| k == "rail0.cpu").map(|(_, v)| v.clone());
        if cpu.as_deref() == Some("unbound (binding disabled)") {
            break;
        }
        assert!(Instant::now() < deadline, "rail0.cpu = {cpu:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
