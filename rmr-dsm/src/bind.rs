//! Where a process's threads run: the node's cores split among the job's
//! processes on the node (OpenMP's `OMP_PROC_BIND=spread`, `mpirun
//! --bind-to core`), through hwloc.
//!
//! A process of a static-schedule loop computes a fixed block: when the OS
//! moves two of the job's processes onto one core for a while (or a
//! process's helper threads onto its neighbour's core), the whole job
//! waits for that block at the next barrier. Bound, each process (its
//! compute thread, rayon's threads, its transport's helpers) stays on its
//! own cores.

use hwloc2::{CpuBindFlags, CpuSet, ObjectType, Topology};

/// Where the runtime places this process on its node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bind {
    /// The machine's cores split evenly among the job's processes on this
    /// node, in node-local rank order, when there are at least as many
    /// cores as processes; left unbound when the node runs more of the
    /// job's processes than it has cores (they must share), or only one.
    /// A process its launcher bound already (`mpirun --bind-to`, `srun`,
    /// `taskset`, a cpuset) keeps that binding. Processes of separate jobs
    /// on one node do not know of each other: each job splits the cores
    /// its own way. Threads a process started before it was bound (a rayon
    /// pool built before `Dsm::join`) are bound with it,
    /// and share its cores.
    #[default]
    Auto,
    /// Never: the OS places the threads (as the launcher left them).
    Off,
}

/// Binds this process (all its threads, and those it starts later) to
/// its share of the node's cores under `how`, as local rank `rank` of
/// `local` processes. Returns what was done, for reports: `cores 0-0 of
/// 2`, `bound by its launcher (2 CPUs)` or `unbound (why)`. Never fails:
/// a process that cannot be bound runs unbound.
pub(crate) fn bind_process(how: Bind, rank: usize, local: usize) -> String {
    if how == Bind::Off {
        return "unbound (binding off)".into();
    }
    if local <= 1 {
        return "unbound (the job's only process on this node)".into();
    }
    let Some(mut topo) = Topology::new() else {
        return "unbound (hwloc could not load the topology)".into();
    };
    let Some(allowed) = topo.get_cpubind(CpuBindFlags::CPUBIND_PROCESS) else {
        return "unbound (hwloc could not read this process's binding)".into();
    };
    // A launcher (mpirun --bind-to, srun, taskset, a cgroup's cpuset) that
    // placed this process already is obeyed, not split again.
    if topo.object_at_root().cpuset().is_some_and(|all| all != allowed) {
        return format!("bound by its launcher ({} CPUs)", allowed.weight());
    }
    // Cores, or processing units where hwloc reports no cores.
    let units = |t: ObjectType| -> Vec<CpuSet> {
        topo.objects_with_type(&t)
            .map(|v| v.iter().filter_map(|o| o.cpuset()).filter(|c| !c.is_empty()).collect())
            .unwrap_or_default()
    };
    let mut cores = units(ObjectType::Core);
    if cores.is_empty() {
        cores = units(ObjectType::PU);
    }
    let Some((first, last)) = share(cores.len(), rank, local) else {
        return format!("unbound ({local} processes on this node, {} cores)", cores.len());
    };
    let mine: CpuSet = cores[first..=last].iter().flat_map(|c| c.clone().into_iter()).collect();
    match topo.set_cpubind(mine, CpuBindFlags::CPUBIND_PROCESS) {
        Ok(()) => format!("cores {first}-{last} of {}", cores.len()),
        Err(e) => format!("unbound (hwloc bind failed: {e:?})"),
    }
}

/// The cores (first, last; by index among `cores`) of local rank `rank`
/// of `local`: an even split, the remainder unused; `None` when there are
/// fewer cores than processes.
fn share(cores: usize, rank: usize, local: usize) -> Option<(usize, usize)> {
    if local == 0 || cores < local || rank >= local {
        return None;
    }
    let k = cores / local;
    Some((rank * k, rank * k + k - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_are_split_evenly_and_never_shared() {
        assert_eq!(share(2, 0, 2), Some((0, 0)));
        assert_eq!(share(2, 1, 2), Some((1, 1)));
        assert_eq!(share(8, 1, 3), Some((2, 3)), "8 cores, 3 processes: 2 each");
        assert_eq!(share(3, 2, 4), None, "more processes than cores: unbound");
        assert_eq!(share(4, 4, 4), None);
        for local in 1..6 {
            for cores in local..20 {
                let mut next = 0;
                for r in 0..local {
                    let (a, b) = share(cores, r, local).unwrap();
                    assert_eq!(a, next, "contiguous, in rank order");
                    assert!(b >= a && b < cores);
                    next = b + 1;
                }
            }
        }
    }

    #[test]
    fn off_and_alone_stay_unbound() {
        assert!(bind_process(Bind::Off, 0, 2).starts_with("unbound"));
        assert!(bind_process(Bind::Auto, 0, 1).starts_with("unbound"));
    }
}
