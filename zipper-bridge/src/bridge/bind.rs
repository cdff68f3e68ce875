//! Thread placement of the forwarding threads, through hwloc (as the
//! multirail layer's pinned rail threads: [`multirail::bind_thread_to_core`]).
//!
//! The thread that reads side `s` is bound to core `s mod n`, of the `n`
//! cores the bridge process may use (its launcher's binding is respected).
//! Choosing the core NUMA-nearest the side's NIC needs the NIC's PCI
//! locality; veth links and loopback have none, so the index rule is what
//! applies in the lab, and the label says so.

/// Binds the calling thread for side `side`; returns a description of the binding.
pub(crate) fn bind_side_thread(side: usize, enabled: bool) -> String {
    let label = multirail::bind_thread_to_core(side, enabled);
    if label.starts_with("core") { format!("{label}, no NIC locality known") } else { label }
}
