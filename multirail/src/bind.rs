//! Thread placement for the `pinned` engine (and the zipper bridge's
//! forwarding threads), through hwloc.
//!
//! Thread `i` is bound to core `i mod cores`. (Choosing the core
//! NUMA-nearest a rail's NIC needs the NIC's PCI locality; veth rails and
//! loopback have none, so the index rule is what applies in the lab.)

use hwloc2::{CpuBindFlags, ObjectType, Topology};

/// Binds the calling thread to core `index mod cores` (one processing unit
/// of it) with hwloc, unless `enabled` is false. Returns a description of
/// the binding for attributes and status lines: `core 1 (pu 1)`, or
/// `unbound (...)` with the reason. Never fails: a machine where hwloc
/// cannot bind runs unbound.
pub fn bind_thread_to_core(index: usize, enabled: bool) -> String {
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
        let idx = index % cores.len();
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
