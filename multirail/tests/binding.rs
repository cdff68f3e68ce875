//! The pinned engine binds one thread per rail to a core with hwloc and
//! reports the binding in the EP's attributes (`rail<i>.cpu`).

use rmr_api::provider::conformance::{Pair, Target};
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
    // Rail i goes to core i mod cores (this test process is not bound).
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

/// Rail `i`'s binding as the EP's attributes report it, once its thread started.
fn rail_cpus(p: &Pair, rails: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let notes = p.a.attr().notes;
        let cpu: Vec<String> = (0..rails)
            .filter_map(|i| notes.iter().find(|(k, _)| *k == format!("rail{i}.cpu")))
            .map(|(_, v)| v.clone())
            .collect();
        if cpu.len() == rails && cpu.iter().all(|c| c != "not started") {
            return cpu;
        }
        assert!(Instant::now() < deadline, "rail bindings not reported: {cpu:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A rank that its launcher bound to one core (`taskset`, `mpirun
/// --bind-to core`) keeps its rail threads on that core: binding picks
/// among the cores the process may use, never another rank's.
#[test]
fn rail_threads_stay_inside_the_process_binding() {
    use hwloc2::{CpuBindFlags, CpuSet, ObjectType, Topology};
    let Some(topo) = Topology::new() else {
        panic!("hwloc could not load the topology");
    };
    let cores = topo.objects_with_type(&ObjectType::Core).expect("cores");
    let Some(last) = cores.last().and_then(|c| c.cpuset()) else {
        panic!("hwloc found no core with a cpuset");
    };
    let last_idx = cores.len() - 1;
    let pu = last.first() as u32;
    drop(topo);
    // Everything runs in a thread bound to the last core's first PU: the
    // EPs (and their rail threads) are created there and inherit it.
    let got = std::thread::spawn(move || {
        let mut topo = Topology::new().expect("topology");
        topo.set_cpubind(CpuSet::from(pu), CpuBindFlags::CPUBIND_THREAD).expect("bind test thread");
        let spec = "multirail:tcp:127.0.0.1,tcp:127.0.0.2,tcp:127.0.0.3;engine=pinned;bind=1";
        let p = Pair::new(&Target::new("multirail-3-confined", register, spec, spec));
        rail_cpus(&p, 3)
    })
    .join()
    .expect("confined thread");
    let want = format!("core {last_idx} (pu {pu})");
    for (i, c) in got.iter().enumerate() {
        assert_eq!(c, &want, "rail {i} left the process's core");
    }
}
