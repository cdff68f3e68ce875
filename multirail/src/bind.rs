//! Thread placement for the `pinned` engine (and the zipper bridge's
//! forwarding threads), through hwloc.
//!
//! Thread `i` is bound to the `i mod n`-th of the `n` cores the calling
//! thread may run on: the process's binding, as a launcher (`mpirun
//! --bind-to core`, `taskset`, a cgroup) set it, is respected, so rail
//! threads never land on a core given to another rank. A process bound to
//! one core keeps every rail thread on that core. (Choosing the core
//! NUMA-nearest a rail's NIC needs the NIC's PCI locality; veth rails and
//! loopback have none, so the index rule is what applies in the lab.)

use hwloc2::{CpuBindFlags, CpuSet, ObjectType, Topology};

/// Binds the calling thread to one processing unit of core `index mod n`,
/// counting only the `n` cores that hold a processing unit the thread may
/// already run on (all cores when the thread is unrestricted), with hwloc,
/// unless `enabled` is false. Returns a description of the binding for
/// attributes and status lines: `core 1 (pu 1)` (hwloc's core index on
/// the machine), or `unbound (...)` with the reason. Never fails: a machine
/// where hwloc cannot bind runs unbound.
pub fn bind_thread_to_core(index: usize, enabled: bool) -> String {
    if !enabled {
        return "unbound (binding disabled)".into();
    }
    let Some(mut topo) = Topology::new() else {
        return "unbound (hwloc could not load the topology)".into();
    };
    // Where this thread may run now (inherited from whoever started it).
    let allowed = topo.get_cpubind(CpuBindFlags::CPUBIND_THREAD);
    let (idx, set) = {
        let cores = match topo.objects_with_type(&ObjectType::Core) {
            Ok(c) if !c.is_empty() => c,
            _ => return "unbound (hwloc found no cores)".into(),
        };
        let cores_of = |only_allowed: bool| -> Vec<(usize, CpuSet)> {
            cores
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    let pus: CpuSet = c
                        .cpuset()?
                        .into_iter()
                        .filter(|&pu| {
                            !only_allowed || allowed.as_ref().is_none_or(|a| a.is_set(pu))
                        })
                        .collect();
                    (!pus.is_empty()).then_some((i, pus))
                })
                .collect()
        };
        let mut usable = cores_of(true);
        if usable.is_empty() {
            // The binding names no core hwloc knows: the whole machine.
            usable = cores_of(false);
        }
        if usable.is_empty() {
            return "unbound (no core has a cpuset)".into();
        }
        let (idx, mut set) = usable.remove(index % usable.len());
        set.singlify();
        (idx, set)
    };
    let label = format!("core {idx} (pu {})", set.first());
    match topo.set_cpubind(set, CpuBindFlags::CPUBIND_THREAD) {
        Ok(()) => label,
        Err(e) => format!("unbound (hwloc bind failed: {e:?})"),
    }
}
