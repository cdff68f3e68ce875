//! Thread placement for the `pinned` engine, through hwloc.
//!
//! Rail thread `r` is bound to core `r mod cores`. (Choosing the core
//! NUMA-nearest the rail's NIC needs the NIC's PCI locality; veth rails and
//! loopback have none, so the index rule is what applies in the lab.)

use hwloc2::{CpuBindFlags, ObjectType, Topology};

/// Binds the calling thread for rail `rail`; returns a description of the
/// binding for the EP's attributes (`rail<i>.cpu`).
pub(crate) fn bind_rail_thread(rail: usize, enabled: bool) -> String {
    if !enabled {
        return "unbound (binding disabled)".into();
    }
    let Some(mut topo) = Topology::new() else {
        return "unbound (hwloc could not load the topology)".into();
    };
    let (idx, set) = {
        let cores = match topo.objects_with_type(&ObjectType::Core) {
            Ok(c) if !c.is_empty() => c,
            _ => return "unbound (hwloc found no cores)".into(),
        };
        let idx = rail % cores.len();
        match cores[idx].cpuset() {
            Some(mut s) => {
                s.singlify();
                (idx, s)
            }
            None => return "unbound (core has no cpuset)".into(),
        }
    };
    let label = format!("core {idx} (pu {})", set.first());
    match topo.set_cpubind(set, CpuBindFlags::CPUBIND_THREAD) {
        Ok(()) => label,
        Err(e) => format!("unbound (hwloc bind failed: {e:?})"),
    }
}
