//! Synchronisation: the barrier, named locks with guards, `critical`, the
//! job-wide counter, and the failure that ends a process's part in them.
//! Every lock word and the counter live in the sync area homed at rank 0
//! and are only ever operated on by the backend's atomics, through the EP
//! to rank 0 — on rank 0 itself through its loopback EP — so CPU and NIC
//! atomics never mix on one word (on verbs they are not atomic with
//! respect to each other).

use super::runtime::{COUNTER_OFF, Dsm, LOCK_SLOTS};
use super::{DsmError, Result};
use rmr::{CompareSwap, Cookie, DtoFlags, Sge};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A lock name's 64-bit hash (FNV-1a): its identity here.
fn name_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The lock word `name` maps to. Two names that share a word share the
/// lock: correct, only less parallel, and a thread that holds one may take
/// the other (see [`Dsm::lock`]).
fn slot_of(name: &str) -> u64 {
    name_hash(name) % LOCK_SLOTS
}

/// The name [`Dsm::critical`] locks.
const CRITICAL: &str = "rmr-dsm critical";

/// A held job-wide lock; released (this process's writes sent home first)
/// when dropped — also while a panic unwinds. [`LockGuard::unlock`]
/// releases it and reports a failure; a failure in `drop` is reported by
/// the next [`Dsm::barrier`] or [`Dsm::lock`] (and, as every failed
/// release, ends this process's part in the job's synchronisation).
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard<'a> {
    dsm: &'a Dsm,
    slot: u64,
    /// The name's hash (see [`name_hash`]).
    name: u64,
    held: bool,
}

impl LockGuard<'_> {
    /// Releases the lock: sends this process's writes home, then frees the
    /// lock word (unless this thread still holds it for another name that
    /// shares it).
    ///
    /// # Errors
    /// A failed flush or atomic, or a lock word that no longer names this
    /// process.
    pub fn unlock(mut self) -> Result<()> {
        self.held = false;
        self.dsm.release(self.slot, self.name)
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        if self.held
            && let Err(e) = self.dsm.release(self.slot, self.name)
        {
            self.dsm.deferred.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
        }
    }
}

impl Dsm {
    /// A release-consistency barrier: every process's writes before it are
    /// visible to every process after it (release, barrier, acquire). Also
    /// reports a failure a lock guard met while it was dropped.
    ///
    /// A failed barrier (or lock, or release) ends this process's part in
    /// the job's synchronisation: later barriers and locks return
    /// [`DsmError::Failed`] at once. A process that went on would meet its
    /// next barrier with the others' current one, or with writes that never
    /// reached their homes; the others instead see their barrier fail
    /// (time out) rather than go on without its writes. A timeout counts
    /// too: a barrier that waited out its timeout (a process that never
    /// came, or one far slower than the others) ends it the same way, as
    /// does a failed diff run, which fails every wait after it.
    ///
    /// # Errors
    /// A failed flush or barrier, a deferred failure, or
    /// [`DsmError::Failed`] after an earlier one.
    pub fn barrier(&self) -> Result<()> {
        self.live()?;
        let r = self.sync_copies(false).and_then(|()| {
            self.barrier.lock().unwrap_or_else(|e| e.into_inner()).wait()?;
            self.sync_copies(true)
        });
        self.failing(r)?;
        self.stats.barriers.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this process still takes part in the job's synchronisation:
    /// a failure deferred from a guard's `drop` is reported (once, and it
    /// ends that part); after any failed synchronisation,
    /// [`DsmError::Failed`].
    pub(crate) fn live(&self) -> Result<()> {
        if let Some(e) = self.deferred.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return self.failing(Err(e));
        }
        match &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(why) => Err(DsmError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// `r`, remembered if it failed (see [`Dsm::barrier`]).
    pub(crate) fn failing<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| e.to_string());
        }
        r
    }

    /// Compare-and-swap on a word of the sync area (through the backend's
    /// atomics, on every rank); returns the old value.
    fn cas(&self, off: u64, cmp: u64, swap: u64) -> Result<u64> {
        let ep = self.mesh.ep(0)?;
        let sge = Sge::new(&*self.cache_lmr, off, 8);
        let c = self.mesh.run(|c| {
            ep.post_cmp_swap(
                sge,
                self.ctxs[0].at(off),
                CompareSwap { compare: cmp, swap },
                Cookie(c),
                DtoFlags::empty(),
            )
        })?;
        c.imm.ok_or_else(|| DsmError::Protocol("compare-and-swap without a result".into()))
    }

    /// Takes the job-wide lock `name` (spinning on compare-and-swap with
    /// backoff), then sends this process's own writes home and drops its
    /// copies (acquire): what the lock's previous holders wrote is visible
    /// from here on, and writes made before the lock are kept.
    ///
    /// A thread that holds a lock whose name shares `name`'s lock word
    /// takes `name` at once (names are spread over a fixed set of words);
    /// the word is freed when the last of its guards goes, and every
    /// release still sends this process's writes home. A thread that takes
    /// a name it holds already gets [`DsmError::AlreadyHeld`] (a lock is
    /// not reentrant: taken again it would wait for itself). Other threads
    /// of this process wait for the thread that holds the word.
    ///
    /// ```no_run
    /// # fn f(dsm: &rmr_dsm::Dsm, total: &rmr_dsm::Shared<'_, u64>) -> rmr_dsm::Result<()> {
    /// let _g = dsm.lock("total")?;
    /// total.set(0, total.get(0)? + 1)?;
    /// // released here, also if the code above panics
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A failed atomic or flush (after which this process takes part in
    /// no more synchronisation, see [`Dsm::barrier`]), or
    /// [`DsmError::Failed`] after an earlier failure.
    pub fn lock(&self, name: &str) -> Result<LockGuard<'_>> {
        self.live()?;
        let (hash, slot) = (name_hash(name), slot_of(name));
        let me_t = std::thread::current().id();
        {
            let mut w = self.held.words.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match w.get_mut(&slot) {
                    Some((t, names)) if *t == me_t => {
                        if names.contains(&hash) {
                            return Err(DsmError::AlreadyHeld(name.to_string()));
                        }
                        names.push(hash);
                        drop(w);
                        self.stats.lock_acquired.fetch_add(1, Ordering::Relaxed);
                        let g = LockGuard { dsm: self, slot, name: hash, held: true };
                        self.failing(self.sync_copies(true))?;
                        return Ok(g);
                    }
                    Some(_) => {
                        w = self.held.freed.wait(w).unwrap_or_else(|e| e.into_inner());
                        drop(w);
                        self.live()?;
                        w = self.held.words.lock().unwrap_or_else(|e| e.into_inner());
                    }
                    None => {
                        w.insert(slot, (me_t, vec![hash]));
                        break;
                    }
                }
            }
        }
        let me = self.me as u64 + 1;
        let mut nap = Duration::from_micros(5);
        loop {
            match self.cas(8 * slot, 0, me) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    // The word's state is unknown (the atomic may have
                    // happened): this process stops here.
                    self.unheld(slot);
                    return self.failing(Err(e));
                }
            }
            self.stats.lock_retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
        self.stats.lock_acquired.fetch_add(1, Ordering::Relaxed);
        // From here on the guard frees the word, even if the acquire fails.
        let g = LockGuard { dsm: self, slot, name: hash, held: true };
        self.failing(self.sync_copies(true))?;
        Ok(g)
    }

    /// Sends this process's writes home (release), then lets go of lock
    /// `name` on word `slot`, freeing the word if no other name holds it.
    fn release(&self, slot: u64, name: u64) -> Result<()> {
        let flushed = self.sync_copies(false);
        let outermost = {
            let mut w = self.held.words.lock().unwrap_or_else(|e| e.into_inner());
            match w.get_mut(&slot) {
                Some((_, names)) => {
                    names.retain(|&h| h != name);
                    names.is_empty()
                }
                None => true,
            }
        };
        if !outermost {
            return self.failing(flushed);
        }
        let me = self.me as u64 + 1;
        let freed = match self.cas(8 * slot, me, 0) {
            Ok(v) if v == me => Ok(()),
            Ok(v) => Err(DsmError::Protocol(format!(
                "rank {} released lock word {slot}, which named {v}",
                self.me
            ))),
            Err(e) => Err(e),
        };
        self.unheld(slot);
        self.failing(flushed.and(freed))
    }

    /// This process's threads no longer hold lock word `slot`.
    fn unheld(&self, slot: u64) {
        self.held.words.lock().unwrap_or_else(|e| e.into_inner()).remove(&slot);
        self.held.freed.notify_all();
    }

    /// Runs `f` under the job-wide critical-section lock (OpenMP's
    /// `critical`): one thread of one process at a time.
    ///
    /// # Errors
    /// The lock's failures, or `f`'s.
    pub fn critical<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let g = self.lock(CRITICAL)?;
        let r = f();
        let u = g.unlock();
        let r = r?;
        u?;
        Ok(r)
    }

    /// Atomically adds `v` to the job-wide counter; returns its old value.
    ///
    /// # Errors
    /// A failed atomic.
    pub fn fetch_add(&self, v: u64) -> Result<u64> {
        let ep = self.mesh.ep(0)?;
        let sge = Sge::new(&*self.cache_lmr, COUNTER_OFF, 8);
        let c = self.mesh.run(|c| {
            ep.post_fetch_add(sge, self.ctxs[0].at(COUNTER_OFF), v, Cookie(c), DtoFlags::empty())
        })?;
        c.imm.ok_or_else(|| DsmError::Protocol("fetch-and-add without a result".into()))
    }

    /// The counter's value now (an atomic add of 0).
    ///
    /// # Errors
    /// A failed atomic.
    pub fn counter(&self) -> Result<u64> {
        self.fetch_add(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_names_can_share_a_lock_word() {
        // The litmus suite's nested-lock case takes these two inside each
        // other: they must share a word for it to test reentrancy.
        assert_eq!(slot_of("lock194"), slot_of(CRITICAL));
    }

    #[test]
    fn names_map_to_lock_words_inside_the_lock_area() {
        assert_eq!(slot_of("a"), slot_of("a"));
        assert_ne!(slot_of("a"), slot_of("b"));
        for n in ["", "x", CRITICAL, "a much longer lock name than usual"] {
            assert!(slot_of(n) < LOCK_SLOTS);
        }
    }
}
