//! The runtime: pages, homes, copies, twins, diffs, barrier, lock.

use super::mesh::Mesh;
use super::{DsmError, PAGE, Result};
use rmr::boot::Bootstrap;
use rmr::coll::{Barrier, BarrierConfig};
use rmr::{Access, DtoFlags, Lmr, MemRegion, RmrContext, Sge};
use rmr::{CompareSwap, Cookie};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runtime settings.
#[derive(Clone, Debug)]
pub struct DsmConfig {
    /// The rmr IA spec of this process (e.g. `tcp:127.0.0.1`, or a
    /// multirail spec).
    pub spec: String,
    /// Size of the shared region in bytes (rounded up to whole pages).
    pub bytes: usize,
    /// The barrier's settings.
    pub barrier: BarrierConfig,
}

/// Where a page's copy stands in this process.
enum Page {
    /// No copy (or a stale one): the next read fetches it from home.
    Invalid,
    /// A copy equal to home's at the last barrier.
    Clean,
    /// A written copy and its twin (the copy as it was before the first write).
    Dirty(Box<[u8]>),
}

/// Counters of what the runtime moved (in [`Dsm::job_stats`] order).
#[derive(Debug, Default)]
pub struct Stats {
    /// Pages fetched from their homes with RDMA reads.
    pub pages_fetched: AtomicU64,
    /// Bytes sent home as diffs (changed byte runs).
    pub diff_bytes: AtomicU64,
    /// RDMA writes that carried those runs.
    pub diff_runs: AtomicU64,
    /// Bytes that whole dirty pages would have taken instead.
    pub whole_page_bytes: AtomicU64,
    /// Barriers passed.
    pub barriers: AtomicU64,
    /// Lock acquisitions (and failed compare-and-swap attempts).
    pub lock_acquired: AtomicU64,
    /// Failed compare-and-swap attempts while taking the lock.
    pub lock_retries: AtomicU64,
}

/// The sync page (page 0, homed at rank 0): the lock word and a counter.
const LOCK_OFF: u64 = 0;
const COUNTER_OFF: u64 = 8;

/// One shared address space across the processes of a job.
pub struct Dsm {
    boot: Bootstrap,
    mesh: Mesh,
    me: usize,
    n: usize,
    /// User bytes (addresses `0..len`).
    len: usize,
    /// User pages; region page `1 + u` holds user page `u`.
    upages: usize,
    home: Arc<MemRegion>,
    home_lmr: Arc<dyn Lmr>,
    cache: Arc<MemRegion>,
    cache_lmr: Arc<dyn Lmr>,
    ctxs: Vec<RmrContext>,
    pages: Vec<Mutex<Page>>,
    barrier: Mutex<Barrier>,
    stats: Stats,
}

impl Dsm {
    /// Joins the job (bootstrap from the environment: `mpirun`, or
    /// `RMR_RANK`/`RMR_SIZE`/`RMR_ROOT`), connects every process to every
    /// other, registers the region once and exchanges its RMR contexts.
    ///
    /// # Errors
    /// Bootstrap, connection and registration failures.
    pub fn join(cfg: &DsmConfig) -> Result<Dsm> {
        let boot = Bootstrap::from_env()?;
        let ia = rmr::open(&cfg.spec)?;
        let (me, n) = (boot.rank(), boot.size());
        let upages = cfg.bytes.div_ceil(PAGE).max(1);
        let region = (1 + upages) * PAGE;
        let mesh = Mesh::connect(&boot, ia.clone())?;
        let home = MemRegion::new(region);
        let home_lmr = mesh.pz.register_all(&home, Access::ALL)?;
        let cache = MemRegion::new(region);
        let cache_lmr = mesh.pz.register_all(&cache, Access::LOCAL_WRITE)?;
        let ctxs = Mesh::exchange(&boot, &home_lmr.rmr_context())?;
        let barrier = Barrier::new(&boot, &ia, &cfg.barrier)?;
        let pages = (0..1 + upages).map(|_| Mutex::new(Page::Invalid)).collect();
        let dsm = Dsm {
            boot,
            mesh,
            me,
            n,
            len: upages * PAGE,
            upages,
            home,
            home_lmr,
            cache,
            cache_lmr,
            ctxs,
            pages,
            barrier: Mutex::new(barrier),
            stats: Stats::default(),
        };
        dsm.barrier()?;
        Ok(dsm)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Number of processes.
    pub fn procs(&self) -> usize {
        self.n
    }

    /// Size of the shared region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never: at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How the job was started (the bootstrap's one-line description).
    pub fn launcher(&self) -> &str {
        self.boot.describe()
    }

    /// What the runtime moved so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The job's totals: every process's [`Stats`] summed (a collective:
    /// every process calls it).
    ///
    /// # Errors
    /// A failed exchange.
    pub fn job_stats(&self) -> Result<[u64; 7]> {
        let s = &self.stats;
        let mine = [
            &s.pages_fetched,
            &s.diff_bytes,
            &s.diff_runs,
            &s.whole_page_bytes,
            &s.barriers,
            &s.lock_acquired,
            &s.lock_retries,
        ]
        .map(|a| a.load(Ordering::Relaxed));
        let b: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut sum = [0u64; 7];
        for theirs in self.boot.allgather(&b)? {
            for (i, c) in theirs.chunks_exact(8).take(7).enumerate() {
                sum[i] += u64::from_le_bytes(c.try_into().expect("8"));
            }
        }
        Ok(sum)
    }

    /// The home process of region page `p` (page 0 is the sync page).
    fn home_of(&self, p: usize) -> usize {
        if p == 0 { 0 } else { (p - 1) * self.n / self.upages }
    }

    /// The user pages homed at this process, as addresses.
    pub fn my_home(&self) -> Range<usize> {
        let first = (0..self.upages).find(|&u| self.home_of(u + 1) == self.me);
        let last = (0..self.upages).rev().find(|&u| self.home_of(u + 1) == self.me);
        match (first, last) {
            (Some(a), Some(b)) => a * PAGE..(b + 1) * PAGE,
            _ => 0..0,
        }
    }

    fn check(&self, addr: usize, len: usize) -> Result<()> {
        match addr.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(DsmError::OutOfRange { addr, len, size: self.len }),
        }
    }

    /// Splits `[addr, addr+len)` into (region page, offset in page, length).
    fn chunks(addr: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        let start = PAGE + addr;
        let end = start + len;
        let mut at = start;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let (p, off) = (at / PAGE, at % PAGE);
                let n = (PAGE - off).min(end - at);
                at += n;
                (p, off, n)
            })
        })
    }

    /// Makes sure this process holds a copy of remote page `p` (state lock held).
    fn fetch(&self, p: usize, st: &mut Page) -> Result<()> {
        if matches!(st, Page::Invalid) {
            let home = self.home_of(p);
            let ep = self.mesh.ep(home)?;
            let off = (p * PAGE) as u64;
            let sge = [Sge::new(&*self.cache_lmr, off, PAGE as u64)];
            self.mesh.run(|c| {
                ep.post_rdma_read(&sge, self.ctxs[home].at(off), Cookie(c), DtoFlags::empty())
            })?;
            self.stats.pages_fetched.fetch_add(1, Ordering::Relaxed);
            *st = Page::Clean;
        }
        Ok(())
    }

    /// Copies `buf.len()` shared bytes at `addr` into `buf`.
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], or a failed fetch.
    pub fn read(&self, addr: usize, buf: &mut [u8]) -> Result<()> {
        self.check(addr, buf.len())?;
        let mut at = 0;
        for (p, off, n) in Self::chunks(addr, buf.len()) {
            let dst = &mut buf[at..at + n];
            let src = (p * PAGE + off) as u64;
            if self.home_of(p) == self.me {
                self.home.read(src, dst)?;
            } else {
                let mut st = self.pages[p].lock().unwrap_or_else(|e| e.into_inner());
                self.fetch(p, &mut st)?;
                self.cache.read(src, dst)?;
            }
            at += n;
        }
        Ok(())
    }

    /// Writes `data` into the shared region at `addr` (visible to others
    /// after the next [`Dsm::barrier`] or [`Dsm::unlock`]).
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], or a failed fetch.
    pub fn write(&self, addr: usize, data: &[u8]) -> Result<()> {
        self.check(addr, data.len())?;
        let mut at = 0;
        for (p, off, n) in Self::chunks(addr, data.len()) {
            let src = &data[at..at + n];
            let dst = (p * PAGE + off) as u64;
            if self.home_of(p) == self.me {
                self.home.write(dst, src)?;
            } else {
                let mut st = self.pages[p].lock().unwrap_or_else(|e| e.into_inner());
                self.fetch(p, &mut st)?;
                if matches!(*st, Page::Clean) {
                    let twin = self.cache.to_vec((p * PAGE) as u64, PAGE)?;
                    *st = Page::Dirty(twin.into_boxed_slice());
                }
                self.cache.write(dst, src)?;
            }
            at += n;
        }
        Ok(())
    }

    /// Reads `out.len()` little-endian f64 values at `addr`.
    ///
    /// # Errors
    /// As [`Dsm::read`].
    pub fn read_f64s(&self, addr: usize, out: &mut [f64]) -> Result<()> {
        let mut b = vec![0u8; out.len() * 8];
        self.read(addr, &mut b)?;
        for (v, c) in out.iter_mut().zip(b.chunks_exact(8)) {
            *v = f64::from_le_bytes(c.try_into().expect("8"));
        }
        Ok(())
    }

    /// Writes f64 values at `addr`.
    ///
    /// # Errors
    /// As [`Dsm::write`].
    pub fn write_f64s(&self, addr: usize, vals: &[f64]) -> Result<()> {
        let b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(addr, &b)
    }

    /// Sends the diff of every dirty copy to its page's home (the release
    /// half of a barrier or an unlock). Returns when all of it has landed.
    fn flush(&self) -> Result<()> {
        let mut last: Vec<Option<(u64, u64)>> = vec![None; self.n];
        for p in 0..self.pages.len() {
            let mut st = self.pages[p].lock().unwrap_or_else(|e| e.into_inner());
            let Page::Dirty(twin) = &*st else { continue };
            let home = self.home_of(p);
            let ep = self.mesh.ep(home)?;
            let base = (p * PAGE) as u64;
            let now = self.cache.to_vec(base, PAGE)?;
            self.stats.whole_page_bytes.fetch_add(PAGE as u64, Ordering::Relaxed);
            for run in diff_runs(twin, &now) {
                // Post every run but the last to each home suppressed; the
                // last one, signalled, completes after all before it.
                if let Some((off, len)) = last[home].take() {
                    let sge = [Sge::new(&*self.cache_lmr, off, len)];
                    ep.post_rdma_write(
                        &sge,
                        self.ctxs[home].at(off),
                        Cookie(0),
                        DtoFlags::SUPPRESS,
                    )?;
                }
                let off = base + run.start as u64;
                last[home] = Some((off, run.len() as u64));
                self.stats.diff_bytes.fetch_add(run.len() as u64, Ordering::Relaxed);
                self.stats.diff_runs.fetch_add(1, Ordering::Relaxed);
            }
            *st = Page::Clean;
        }
        for (home, l) in last.into_iter().enumerate() {
            if let Some((off, len)) = l {
                let ep = self.mesh.ep(home)?;
                let sge = [Sge::new(&*self.cache_lmr, off, len)];
                self.mesh.run(|c| {
                    ep.post_rdma_write(&sge, self.ctxs[home].at(off), Cookie(c), DtoFlags::empty())
                })?;
            }
        }
        Ok(())
    }

    /// Drops every copy (the acquire half: later reads fetch fresh pages).
    fn invalidate(&self) {
        for (p, s) in self.pages.iter().enumerate() {
            if self.home_of(p) != self.me {
                *s.lock().unwrap_or_else(|e| e.into_inner()) = Page::Invalid;
            }
        }
    }

    /// A release-consistency barrier: every process's writes before it are
    /// visible to every process after it.
    ///
    /// # Errors
    /// A failed flush or barrier.
    pub fn barrier(&self) -> Result<()> {
        self.flush()?;
        self.barrier.lock().unwrap_or_else(|e| e.into_inner()).wait()?;
        self.invalidate();
        self.stats.barriers.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `f(i)` for this process's share of `range` (a block of it), on
    /// rayon's threads. No barrier is implied.
    pub fn parallel_for<F>(&self, range: Range<usize>, f: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        use rayon::prelude::*;
        let mine = share(range, self.me, self.n);
        mine.into_par_iter().for_each(f);
    }

    /// This process's block of `range` (what [`Dsm::parallel_for`] runs here).
    pub fn share(&self, range: Range<usize>) -> Range<usize> {
        share(range, self.me, self.n)
    }

    /// Compare-and-swap on a word of the sync page at rank 0; returns the
    /// old value. Rank 0 uses a CPU atomic on its own memory (the TCP
    /// backend applies remote atomics with CPU atomics too, so they agree).
    fn cas(&self, off: u64, cmp: u64, swap: u64) -> Result<u64> {
        if self.me == 0 {
            let w = self.home.atomic_u64(off)?;
            return Ok(u64::from_le(
                match w.compare_exchange(
                    cmp.to_le(),
                    swap.to_le(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(v) | Err(v) => v,
                },
            ));
        }
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

    /// Takes the job-wide lock (spinning on remote compare-and-swap with
    /// backoff), then sends this process's own writes home and drops stale
    /// copies (acquire). Writes made before the lock are kept: dropping a
    /// written copy without sending its diff would lose them.
    ///
    /// # Errors
    /// A failed atomic.
    pub fn lock(&self) -> Result<()> {
        let me = self.me as u64 + 1;
        let mut nap = Duration::from_micros(5);
        while self.cas(LOCK_OFF, 0, me)? != 0 {
            self.stats.lock_retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(2));
        }
        self.stats.lock_acquired.fetch_add(1, Ordering::Relaxed);
        self.flush()?;
        self.invalidate();
        Ok(())
    }

    /// Sends this process's writes home (release), then frees the lock.
    ///
    /// # Errors
    /// A failed flush or atomic, or a lock this process does not hold.
    pub fn unlock(&self) -> Result<()> {
        self.flush()?;
        let me = self.me as u64 + 1;
        match self.cas(LOCK_OFF, me, 0)? {
            v if v == me => Ok(()),
            v => {
                Err(DsmError::Protocol(format!("unlock by rank {} of a lock held by {v}", self.me)))
            }
        }
    }

    /// Atomically adds `v` to the job-wide counter; returns its old value.
    ///
    /// # Errors
    /// A failed atomic.
    pub fn fetch_add(&self, v: u64) -> Result<u64> {
        if self.me == 0 {
            let w = self.home.atomic_u64(COUNTER_OFF)?;
            let mut cur = w.load(Ordering::Acquire);
            loop {
                let new = (u64::from_le(cur).wrapping_add(v)).to_le();
                match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Ok(u64::from_le(cur)),
                    Err(x) => cur = x,
                }
            }
        }
        let ep = self.mesh.ep(0)?;
        let sge = Sge::new(&*self.cache_lmr, COUNTER_OFF, 8);
        let c = self.mesh.run(|c| {
            ep.post_fetch_add(sge, self.ctxs[0].at(COUNTER_OFF), v, Cookie(c), DtoFlags::empty())
        })?;
        c.imm.ok_or_else(|| DsmError::Protocol("fetch-and-add without a result".into()))
    }

    /// The counter's value as rank 0 sees it (call after a barrier).
    ///
    /// # Errors
    /// A failed read.
    pub fn counter(&self) -> Result<u64> {
        if self.me == 0 {
            return Ok(self.home.load_u64(COUNTER_OFF)?);
        }
        let ep = self.mesh.ep(0)?;
        let sge = [Sge::new(&*self.cache_lmr, COUNTER_OFF, 8)];
        self.mesh.run(|c| {
            ep.post_rdma_read(&sge, self.ctxs[0].at(COUNTER_OFF), Cookie(c), DtoFlags::empty())
        })?;
        Ok(self.cache.load_u64(COUNTER_OFF)?)
    }

    /// The home LMR (for diagnostics: its RMR context is what peers target).
    pub fn home_lmr(&self) -> &Arc<dyn Lmr> {
        &self.home_lmr
    }

    /// The IA's attributes (provider, rails).
    pub fn ia_attr(&self) -> rmr::IaAttr {
        self.mesh.ia.attr().clone()
    }
}

/// Block `me` of `n` of `range`.
fn share(range: Range<usize>, me: usize, n: usize) -> Range<usize> {
    let len = range.end.saturating_sub(range.start);
    let a = range.start + len * me / n;
    let b = range.start + len * (me + 1) / n;
    a..b
}

/// The runs of bytes where `now` differs from `twin`; runs closer than 16
/// bytes are merged (one RDMA write is cheaper than two tiny ones).
pub(crate) fn diff_runs(twin: &[u8], now: &[u8]) -> Vec<Range<usize>> {
    const GAP: usize = 16;
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut i = 0;
    while i < now.len() {
        if twin[i] == now[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < now.len() && twin[i] != now[i] {
            i += 1;
        }
        match runs.last_mut() {
            Some(r) if start - r.end < GAP => r.end = i,
            _ => runs.push(start..i),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_cover_every_change_and_merge_close_runs() {
        let twin = vec![0u8; 100];
        let mut now = twin.clone();
        now[3] = 1;
        now[10] = 1; // within 16 of the first: merged
        now[60] = 2;
        now[61] = 2;
        assert_eq!(diff_runs(&twin, &now), vec![3..11, 60..62]);
        assert!(diff_runs(&twin, &twin).is_empty());
    }

    #[test]
    fn shares_tile_the_range() {
        for n in 1..9 {
            let mut next = 5;
            for me in 0..n {
                let s = share(5..105, me, n);
                assert_eq!(s.start, next);
                next = s.end;
            }
            assert_eq!(next, 105);
        }
    }

    #[test]
    fn chunks_follow_page_boundaries() {
        let c: Vec<_> = Dsm::chunks(PAGE - 8, 24).collect();
        assert_eq!(c, vec![(1, PAGE - 8, 8), (2, 0, 16)]);
    }
}
