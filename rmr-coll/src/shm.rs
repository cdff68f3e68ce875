//! Shared memory between the processes of one node: [`ShmWords`], atomic
//! words in a file under `/dev/shm` that every local process maps, and the
//! node's flat tree built on it.

use crate::wait::Backoff;
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

/// The flat tree of one node: word 0 is the master's release word, word
/// `1 + l` the arrival flag of local rank `l`. Back-to-back barriers are
/// told apart by the sequence number stored (flags only grow).
pub(crate) struct NodeTree {
    shm: ShmWords,
    local_rank: usize,
    local_size: usize,
    timeout: Duration,
}

impl NodeTree {
    pub(crate) fn new(
        shm: ShmWords,
        local_rank: usize,
        local_size: usize,
        timeout: Duration,
    ) -> Self {
        NodeTree { shm, local_rank, local_size, timeout }
    }

    pub(crate) fn is_master(&self) -> bool {
        self.local_rank == 0
    }

    fn wait(&self, seq: u64, done: impl Fn() -> bool) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut b = Backoff::default();
        while !done() {
            if Instant::now() >= deadline {
                return Err(Error::Timeout { seq, rank: usize::MAX, after: self.timeout });
            }
            b.snooze();
        }
        Ok(())
    }

    /// A non-master: announce arrival, wait for the release.
    pub(crate) fn arrive_and_wait(&self, seq: u64) -> Result<()> {
        self.shm.word(1 + self.local_rank).store(seq, Ordering::Release);
        let rel = self.shm.word(0);
        self.wait(seq, || rel.load(Ordering::Acquire) >= seq)
    }

    /// The master: wait until every local process arrived.
    pub(crate) fn gather(&self, seq: u64) -> Result<()> {
        self.wait(seq, || {
            (1..self.local_size).all(|l| self.shm.word(1 + l).load(Ordering::Acquire) >= seq)
        })
    }

    /// The master: release the local processes.
    pub(crate) fn release(&self, seq: u64) {
        self.shm.word(0).store(seq, Ordering::Release);
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

    #[test]
    fn a_flat_tree_in_threads() {
        let p = std::env::temp_dir().join(format!("rmr-coll-tree-test-{}", std::process::id()));
        let n = 4;
        let trees: Vec<NodeTree> = (0..n)
            .map(|l| {
                let s =
                    if l == 0 { ShmWords::create(&p, n + 1) } else { ShmWords::open(&p, n + 1) };
                NodeTree::new(s.unwrap(), l, n, Duration::from_secs(10))
            })
            .collect();
        trees[0].shm.unlink().unwrap();
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
}
