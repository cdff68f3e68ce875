//! Shared memory between the processes of one node: [`ShmWords`], atomic
//! words in a file under `/dev/shm` that every local process maps, and the
//! node's flat tree built on it.

use crate::{Error, Result};
use memmap2::MmapRaw;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes between two words: one cache line each, so that a process's flag
/// never shares a line with another's.
pub const WORD_STRIDE: usize = 64;

/// `words` 64-bit atomic words, one per cache line, in a file mapped
/// shared (a file in `/dev/shm` is memory that every process of the node
/// maps).
pub struct ShmWords {
    map: MmapRaw,
    words: usize,
    path: PathBuf,
}

fn shm_err(path: &Path, source: std::io::Error) -> Error {
    Error::Shm { path: path.display().to_string(), source }
}

impl ShmWords {
    /// Creates (or truncates) the file at `path` with `words` zeroed words
    /// and maps it.
    ///
    /// # Errors
    /// [`Error::Shm`] when the file cannot be created, sized or mapped.
    pub fn create(path: impl AsRef<Path>, words: usize) -> Result<ShmWords> {
        let path = path.as_ref();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| shm_err(path, e))?;
        f.set_len((words.max(1) * WORD_STRIDE) as u64).map_err(|e| shm_err(path, e))?;
        Self::map(f, path, words)
    }

    /// Maps an existing file made by [`ShmWords::create`] with as many words.
    ///
    /// # Errors
    /// [`Error::Shm`] when it is missing, shorter, or cannot be mapped.
    pub fn open(path: impl AsRef<Path>, words: usize) -> Result<ShmWords> {
        let path = path.as_ref();
        let f =
            OpenOptions::new().read(true).write(true).open(path).map_err(|e| shm_err(path, e))?;
        let len = f.metadata().map_err(|e| shm_err(path, e))?.len();
        if len < (words * WORD_STRIDE) as u64 {
            return Err(shm_err(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{len} bytes only")),
            ));
        }
        Self::map(f, path, words)
    }

    fn map(f: std::fs::File, path: &Path, words: usize) -> Result<ShmWords> {
        let map = MmapRaw::map_raw(&f).map_err(|e| shm_err(path, e))?;
        Ok(ShmWords { map, words, path: path.to_owned() })
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.words
    }

    /// True when there are no words.
    pub fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file's name (the mapping stays valid; the memory goes
    /// when the last process unmaps it).
    ///
    /// # Errors
    /// [`Error::Shm`] from `unlink(2)`.
    pub fn unlink(&self) -> Result<()> {
        std::fs::remove_file(&self.path).map_err(|e| shm_err(&self.path, e))
    }

    /// Word `i`.
    ///
    /// # Panics
    /// When `i >= len()`.
    pub fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.words, "word {i} of {}", self.words);
        // SAFETY: the mapping is page-aligned and at least `words * WORD_STRIDE`
        // bytes long (checked at create/open), so `i * WORD_STRIDE` is in bounds and
        // 8-byte aligned; it lives as long as `&self`. Every process touches these
        // bytes only through atomics (this type hands out nothing else), which is
        // the one sound way to share memory with other processes.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(i * WORD_STRIDE).cast::<u64>()) }
    }
}

/// Sleeps in `futex(2)` while the low 32 bits of the shared word `w` still
/// read `seen` (at most `timeout`). Not `FUTEX_PRIVATE`: the word is shared
/// between processes.
fn futex_wait(w: &AtomicU64, seen: u64, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `low32(w)` points at four aligned bytes of a live mapping
    // (every word is 64-byte aligned); the kernel only reads them, and `ts`
    // outlives the call. A spurious or early return is harmless: callers
    // re-check their condition.
    unsafe {
        libc::syscall(libc::SYS_futex, low32(w), libc::FUTEX_WAIT, seen as u32, &ts, 0usize, 0u32);
    }
}

/// Wakes every process sleeping in [`futex_wait`] on `w`.
fn futex_wake(w: &AtomicU64) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE does not touch the memory.
    unsafe {
        libc::syscall(libc::SYS_futex, low32(w), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32);
    }
}

/// The address of the low 32 bits of a word (what the futex compares).
fn low32(w: &AtomicU64) -> *const u32 {
    let p = std::ptr::from_ref(w).cast::<u32>();
    if cfg!(target_endian = "big") { p.wrapping_add(1) } else { p }
}

/// Polls before a wait sleeps in the kernel, at least: long enough to
/// catch a peer that is running on another core, short enough not to
/// steal the core from the one it waits for on an oversubscribed node
/// (where that is all a wait spins).
const SPINS: u32 = 200;

/// How long a wait spins before it sleeps where the node has a core per
/// local process and the barrier's settings leave the spin to us (about
/// what an OpenMP runtime's active wait spins).
pub(crate) const NODE_SPIN: Duration = Duration::from_millis(1);

/// Longest single futex sleep (the deadline is checked between them).
const NAP: Duration = Duration::from_millis(50);

/// Words of a node tree for `local_size` processes (what [`NodeTree::new`]
/// expects the mapping to hold).
pub(crate) fn tree_words(local_size: usize) -> usize {
    local_size + 4
}

/// The flat tree of one node: word 0 is the master's release word, word
/// `1 + l` the arrival flag of local rank `l`. Back-to-back barriers are
/// told apart by the sequence number stored (flags only grow). A process
/// that waits spins (at least [`SPINS`] looks, and until its `spin` time
/// is up), then sleeps in `futex(2)` on the word it waits for; the process
/// that changes that word wakes it, but only when someone announced (in a
/// sleepers word) that they sleep, so a barrier whose processes all run
/// costs no system call.
///
/// Why spin long where every process has a core: a wake-up out of
/// `futex(2)` takes tens of microseconds on a virtual machine, and a
/// barrier where one process sleeps pays it once or twice (the master's
/// wake-up, then the release's), every time the processes arrive further
/// apart than a short spin.
pub(crate) struct NodeTree {
    shm: ShmWords,
    local_rank: usize,
    local_size: usize,
    timeout: Duration,
    /// How long a wait spins before it sleeps, counted from the wait's
    /// start (it looks at least [`SPINS`] times either way).
    spin: Duration,
}

impl NodeTree {
    /// `shm` must hold [`tree_words`]`(local_size)` words. A wait spins
    /// for `spin` (at least [`SPINS`] looks; at most `timeout`) before it
    /// sleeps.
    pub(crate) fn new(
        shm: ShmWords,
        local_rank: usize,
        local_size: usize,
        timeout: Duration,
        spin: Duration,
    ) -> Self {
        assert!(shm.len() >= tree_words(local_size), "node tree mapping too small");
        NodeTree { shm, local_rank, local_size, timeout, spin: spin.min(timeout) }
    }

    pub(crate) fn is_master(&self) -> bool {
        self.local_rank == 0
    }

    /// Bumped by every arrival: the word the master sleeps on.
    fn doorbell(&self) -> &AtomicU64 {
        self.shm.word(1 + self.local_size)
    }

    /// How many processes sleep on the release word.
    fn release_sleepers(&self) -> &AtomicU64 {
        self.shm.word(2 + self.local_size)
    }

    /// Nonzero while the master sleeps on the doorbell.
    fn master_sleeps(&self) -> &AtomicU64 {
        self.shm.word(3 + self.local_size)
    }

    /// Waits until `done()`, sleeping on `word` (announced in `sleepers`).
    /// The announce / re-check / sleep order pairs with the signaller's
    /// store / check-sleepers order (all `SeqCst`): either the signaller
    /// sees a sleeper and wakes it, or the sleeper sees the new value.
    fn wait(
        &self,
        seq: u64,
        word: &AtomicU64,
        sleepers: &AtomicU64,
        done: impl Fn() -> bool,
    ) -> Result<()> {
        // The timeout counts from here, spin included (the spin is at most
        // the timeout, see `new`).
        let start = Instant::now();
        let deadline = start + self.timeout;
        for i in 0u64.. {
            if done() {
                return Ok(());
            }
            // Past the first looks, the clock is read once in 64 looks, and
            // not at all when the spin is the short one.
            if i >= u64::from(SPINS)
                && (self.spin.is_zero() || i % 64 == 0 && start.elapsed() >= self.spin)
            {
                break;
            }
            if i % 64 == 63 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        loop {
            sleepers.fetch_add(1, Ordering::SeqCst);
            let seen = word.load(Ordering::SeqCst);
            let ready = done();
            if !ready {
                let left = deadline.saturating_duration_since(Instant::now());
                futex_wait(word, seen, left.min(NAP));
            }
            sleepers.fetch_sub(1, Ordering::SeqCst);
            if ready || done() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout { seq, rank: usize::MAX, after: self.timeout });
            }
        }
    }

    /// A non-master: announce arrival, wait for the release.
    pub(crate) fn arrive_and_wait(&self, seq: u64) -> Result<()> {
        self.shm.word(1 + self.local_rank).store(seq, Ordering::SeqCst);
        let bell = self.doorbell();
        bell.fetch_add(1, Ordering::SeqCst);
        if self.master_sleeps().load(Ordering::SeqCst) > 0 {
            futex_wake(bell);
        }
        let rel = self.shm.word(0);
        self.wait(seq, rel, self.release_sleepers(), || rel.load(Ordering::Acquire) >= seq)
    }

    /// The master: wait until every local process arrived.
    pub(crate) fn gather(&self, seq: u64) -> Result<()> {
        self.wait(seq, self.doorbell(), self.master_sleeps(), || {
            (1..self.local_size).all(|l| self.shm.word(1 + l).load(Ordering::Acquire) >= seq)
        })
    }

    /// The master: release the local processes.
    pub(crate) fn release(&self, seq: u64) {
        let rel = self.shm.word(0);
        rel.store(seq, Ordering::SeqCst);
        if self.release_sleepers().load(Ordering::SeqCst) > 0 {
            futex_wake(rel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_shared_between_mappings() {
        let p = std::env::temp_dir().join(format!("rmr-coll-shm-test-{}", std::process::id()));
        let a = ShmWords::create(&p, 3).unwrap();
        let b = ShmWords::open(&p, 3).unwrap();
        a.word(2).store(7, Ordering::Release);
        assert_eq!(b.word(2).load(Ordering::Acquire), 7);
        assert!(ShmWords::open(&p, 100).is_err(), "file shorter than asked");
        a.unlink().unwrap();
        b.word(0).fetch_add(5, Ordering::AcqRel);
        assert_eq!(a.word(0).load(Ordering::Acquire), 5, "still mapped after unlink");
        assert!(matches!(ShmWords::open(&p, 3), Err(Error::Shm { .. })));
    }

    /// `n` processes' views of one node tree (in one process), its file
    /// already unlinked.
    fn trees(name: &str, n: usize, timeout: Duration, spin: Duration) -> Vec<NodeTree> {
        let p = std::env::temp_dir().join(format!("rmr-coll-{name}-{}", std::process::id()));
        let trees: Vec<NodeTree> = (0..n)
            .map(|l| {
                let s = if l == 0 {
                    ShmWords::create(&p, tree_words(n))
                } else {
                    ShmWords::open(&p, tree_words(n))
                };
                NodeTree::new(s.unwrap(), l, n, timeout, spin)
            })
            .collect();
        trees[0].shm.unlink().unwrap();
        trees
    }

    #[test]
    fn a_flat_tree_in_threads() {
        // The short spin, and a spin that some waits outlast (the late
        // processes sleep 300 us) and then sleep.
        for (k, spin) in [Duration::ZERO, Duration::from_micros(200)].into_iter().enumerate() {
            flat_tree_in_threads(k, spin);
        }
    }

    fn flat_tree_in_threads(k: usize, spin: Duration) {
        let n = 4;
        let trees = trees(&format!("tree-test-{k}"), n, Duration::from_secs(10), spin);
        let entered: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        std::thread::scope(|sc| {
            for (l, t) in trees.iter().enumerate() {
                let entered = &entered;
                sc.spawn(move || {
                    for seq in 1..=200u64 {
                        if seq % 7 == l as u64 {
                            std::thread::sleep(Duration::from_micros(300));
                        }
                        entered[l].store(seq, Ordering::SeqCst);
                        if t.is_master() {
                            t.gather(seq).unwrap();
                            t.release(seq);
                        } else {
                            t.arrive_and_wait(seq).unwrap();
                        }
                        for e in entered {
                            assert!(e.load(Ordering::SeqCst) >= seq, "left {seq} early");
                        }
                    }
                });
            }
        });
    }

    /// Two processes; the master arrives `late` after the other, whose
    /// wait spins `spin`: `asleep` is how many announced a sleep by then.
    fn late_master(name: &str, spin: Duration, late: Duration, asleep: u64) {
        let trees = trees(name, 2, Duration::from_secs(30), spin);
        std::thread::scope(|sc| {
            sc.spawn(|| trees[1].arrive_and_wait(1).unwrap());
            std::thread::sleep(late);
            assert_eq!(trees[0].release_sleepers().load(Ordering::SeqCst), asleep, "{name}");
            trees[0].gather(1).unwrap();
            trees[0].release(1);
        });
        assert_eq!(trees[0].release_sleepers().load(Ordering::SeqCst), 0, "{name}: all left");
    }

    #[test]
    fn a_wait_spins_its_spin_time_before_it_sleeps() {
        // 50 ms late, well within a 20 s spin: the other process is still
        // spinning (it never announced a sleep) and leaves when released.
        late_master("spin-test", Duration::from_secs(20), Duration::from_millis(50), 0);
    }

    #[test]
    fn a_wait_sleeps_once_its_spin_is_over() {
        // 200 ms late, long after a 1 ms spin: the other process sleeps in
        // the futex (it announced it) and leaves when released.
        late_master("spun-test", Duration::from_millis(1), Duration::from_millis(200), 1);
    }

    #[test]
    fn sleepers_are_woken_and_a_missing_process_times_out() {
        let t = Duration::from_millis(300);
        let trees = trees("sleep-test", 3, t, Duration::ZERO);
        // The master comes late: both others are asleep in the futex by then
        // (they announced it) and still leave at once when released.
        std::thread::scope(|sc| {
            for tr in &trees[1..] {
                sc.spawn(move || tr.arrive_and_wait(1).unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(trees[0].release_sleepers().load(Ordering::SeqCst), 2, "both asleep");
            trees[0].gather(1).unwrap();
            trees[0].release(1);
        });
        assert_eq!(trees[0].release_sleepers().load(Ordering::SeqCst), 0);
        // Local rank 2 never arrives at barrier 2: the master times out
        // (typed, after its timeout), it does not hang.
        std::thread::scope(|sc| {
            sc.spawn(|| trees[1].shm.word(2).store(2, Ordering::SeqCst));
            let started = Instant::now();
            match trees[0].gather(2) {
                Err(Error::Timeout { seq: 2, .. }) => {}
                other => panic!("expected a timeout, got {other:?}"),
            }
            assert!(started.elapsed() >= t);
        });
    }
}
