//! Thread placement of the forwarding threads, through hwloc (as the
//! multirail layer's pinned rail threads).
//!
//! The thread that reads side `s` is bound to core `s mod cores`.
//! Choosing the core NUMA-nearest the side's NIC needs the NIC's PCI
//! locality; veth links and loopback have none, so the index rule is what
//! applies in the lab, and the label says so.

use hwloc2::{CpuBindFlags, ObjectType, Topology};

/// Binds the calling thread for side `side`; returns a description of the binding.
pub(crate) fn bind_side_thread(side: usize, enabled: bool) -> String {
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
        let idx = side % cores.len();
        match cores[idx].cpuset() {
            Some(mut s) => {
                s.singlify();
                (idx, s)
            }
            None => return "unbound (core has no cpuset)".into(),
        }
    };
    let label = format!("core {idx} (pu {}; no NIC locality known)", set.first());
    match topo.set_cpubind(set, CpuBindFlags::CPUBIND_THREAD) {
        Ok(()) => label,
        Err(e) => format!("unbound (hwloc bind failed: {e:?})"),
    }
}
