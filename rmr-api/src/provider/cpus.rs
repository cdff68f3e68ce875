//! Whether a waiter may spin: the machine's runnable threads against its
//! CPUs (a spinner on a crowded node steals the core its peer needs).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Whether a spinning waiter would not take a CPU someone else needs: the
/// kernel's count of runnable threads (`/proc/loadavg`, read at most every
/// 10 ms) exceeds the machine's online CPUs by at most one (a spinner and
/// its peer, plus one). Spinning on a busy machine delays the very peer
/// whose answer the spinner waits for (on two cores with other work, a
/// spinning ping-pong is several times slower than a blocking one), so
/// then waiters block at once.
///
/// The count is machine-wide, so it is weighed against the machine's CPUs,
/// not against the ones this process may use: two ranks pinned one per
/// core are two runnable spinners on two CPUs, not a crowd on one.
pub fn cpus_idle() -> bool {
    runnable_excess() <= 1
}

/// Whether no thread waits for a CPU at all (runnable threads at most the
/// machine's CPUs): only then may a spin outlast its base (see
/// [`SoftEvd::spin_time`]). An oversubscribed node (ranks sharing cores)
/// keeps short spins; a long one would hold the core a peer needs.
pub(crate) fn cpus_spare() -> bool {
    runnable_excess() == 0
}

/// Runnable threads beyond the machine's online CPUs (`/proc/loadavg`,
/// read at most every 10 ms; 0 where it cannot be read), capped at 255.
fn runnable_excess() -> u8 {
    use std::sync::atomic::AtomicU8;
    static CHECKED: AtomicU64 = AtomicU64::new(0);
    static EXCESS: AtomicU8 = AtomicU8::new(0);
    static CPUS: OnceLock<usize> = OnceLock::new();
    let cpus = *CPUS.get_or_init(online_cpus);
    // Waiters ask on every wait: the coarse clock (the kernel's last tick,
    // read from the vDSO without the TSC) is plenty for a 10 ms period and
    // costs a fraction of `Instant::now`, which a VM may make dear.
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    let now = (t.tv_sec as u64).wrapping_mul(1000).wrapping_add(t.tv_nsec as u64 / 1_000_000) + 1;
    let last = CHECKED.load(Ordering::Relaxed);
    if now.saturating_sub(last) >= 10
        && CHECKED.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        // "0.52 0.51 0.78 2/291 12345": the fourth field is runnable/total.
        let running = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().nth(3)?.split('/').next()?.parse::<usize>().ok());
        let excess = running.map_or(0, |r| r.saturating_sub(cpus).min(255) as u8);
        EXCESS.store(excess, Ordering::Relaxed);
    }
    EXCESS.load(Ordering::Relaxed)
}

/// The machine's online CPUs (`/sys/devices/system/cpu/online`; where it
/// cannot be read, the CPUs this process may run on). Not this process's
/// affinity: ranks pinned one per core each see one CPU there, while the
/// node still has a core for each of them.
pub fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|l| count_cpu_list(&l))
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The shortest time slice Linux lets a thread ask for (100 us).
pub const SHORT_SLICE_NS: u64 = 100_000;

/// Asks the kernel to schedule the calling thread in short slices, for a
/// progress thread: it wakes for a few microseconds of work (answering an
/// RDMA read, an atomic, an acknowledgement) on a CPU where an application
/// thread computes. Linux's scheduler (EEVDF, 6.6 and later) lets a
/// waking thread preempt the running one at once only when it asked for a
/// shorter slice (`sched_setattr(2)`'s `sched_runtime` for `SCHED_OTHER`,
/// honoured since 6.12); with the default slice a woken helper waits until
/// the computing thread's slice ends, about 3 ms, and so does the remote
/// process whose read it would answer. Only a `SCHED_OTHER` thread is
/// changed (a batch or real-time one is left as it is); it keeps its nice
/// value and gets no more CPU time, only shorter turns. Returns whether
/// the call succeeded: kernels before 6.12 accept it and ignore the slice;
/// `seccomp` filters that refuse it leave the thread as it was.
pub fn short_slices() -> bool {
    // SAFETY: `sched_getscheduler` takes an integer and touches no memory.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return false;
    }
    // `struct sched_attr`, its first version (48 bytes).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    // The thread's nice value, kept (`getpriority` of id 0 is the calling
    // thread's on Linux).
    let nice = rustix::process::getpriority_process(None).unwrap_or(0);
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: SHORT_SLICE_NS,
        deadline: 0,
        period: 0,
    };
    // SAFETY: `attr` is a valid `struct sched_attr` whose `size` says how
    // much the kernel may read; pid 0 is the calling thread; flags 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0 as libc::c_long,
            &attr as *const SchedAttr,
            0 as libc::c_long,
        )
    };
    r == 0
}

/// After a thread leaving a long wait woke its IA's progress helper (to
/// take the endpoints over while the thread computes): yields the CPU
/// once, so that the helper runs now. Woken on this thread's CPU, it would
/// otherwise wait for the end of this thread's time slice (milliseconds),
/// and so would the remote reads and atomics it is to answer. At most
/// once per 200 us on a thread (a waiter that leaves many endpoints at once
/// yields once), and not on a crowded machine ([`cpus_idle`] false: more
/// runnable threads than CPUs plus one), where a yield would hand the CPU
/// to another process's thread for a whole slice; the helper's short
/// slice gets it the CPU there at the next turn.
pub fn yield_to_helper() {
    if !cpus_idle() {
        return;
    }
    thread_local! {
        static LAST: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    let now = super::clock::now_ns();
    if now.saturating_sub(LAST.get()) >= 200_000 {
        LAST.set(now);
        std::thread::yield_now();
    }
}

/// The number of CPUs in a kernel CPU list such as "0-3,8,10-11".
fn count_cpu_list(list: &str) -> Option<usize> {
    list.trim().split(',').try_fold(0usize, |n, r| {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
        Some(n + b.checked_sub(a)? + 1)
    })
}

#[cfg(all(test, not(miri)))] // /proc and /sys: not under Miri
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted_and_bad_ones_refused() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list("5"), Some(1));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
        // This machine's own list counts at least the CPUs this process may use.
        let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(online_cpus() >= mine);
    }
}
