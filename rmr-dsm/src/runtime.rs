//! The runtime's core: the region and its pages, homes, copies, twins,
//! diffs, release and acquire (the barrier and the locks built on them
//! are in `sync`).

use super::bind::{Bind, bind_process};
use super::mesh::Mesh;
use super::{DsmError, PAGE, Result};
use rmr::boot::Bootstrap;
use rmr::coll::{Barrier, BarrierConfig};
use rmr::node::{Fabric, Registered};
use rmr::{Access, Cookie, DtoFlags, Ep, Lmr, MemRegion, RmrContext, Sge};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

/// Runtime settings.
#[derive(Clone, Debug)]
pub struct DsmConfig {
    /// The rmr IA spec of this process (e.g. `tcp:127.0.0.1`, or a
    /// multirail spec such as `multirail:tcp:198.18.0.1,tcp:198.18.1.1`).
    pub spec: String,
    /// Size of the shared region in bytes (rounded up to whole pages):
    /// what [`Dsm::alloc`] hands out, and the address range of
    /// [`Dsm::read`] / [`Dsm::write`].
    pub bytes: usize,
    /// The barrier's settings.
    pub barrier: BarrierConfig,
    /// Whether the runtime runs a progress thread (see [`Progress`]).
    pub progress: Progress,
    /// Reach the processes of this node over shared memory (the `shm`
    /// backend) for page data, default on: fetches and diffs between them
    /// skip the network stack. Atomics (locks, counters) stay on `spec`'s
    /// IA for every process, so every update of a word takes one path.
    /// Used where `spec`'s EVDs are software queues (tcp, multirail over
    /// tcp); otherwise every process is reached through `spec`.
    pub shm: bool,
    /// Where this process's threads run on the node (see [`Bind`]); by
    /// default each of the job's processes on a node gets its share of
    /// the node's cores when there are enough. `RMR_DSM_BIND=off` (or
    /// `auto`) overrides it.
    pub bind: Bind,
}

/// Whether the runtime runs a progress thread. It sleeps in the completion
/// wait, so the requests of other processes (reads of this process's home
/// pages, their diffs, atomics) are served at once while this process
/// computes — at the price of a wake-up that preempts the computation for
/// every request. Without it they are served when a thread of this process
/// next waits for the network, or by the backend's own background
/// progress, which on the TCP backend takes over 1-2 ms after the last
/// wait. Hardware RDMA (verbs) serves them without the CPU either way.
/// Measured on 2 CPUs (Jacobi, 256 rows, us per iteration): 2 processes
/// 285-344 without against 394-455 with; 4 processes 1890 without against
/// 929 with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// On when this node runs more processes of the job than this process
    /// may use CPUs (their requests would otherwise wait for a CPU), off
    /// otherwise.
    #[default]
    Auto,
    /// Always: for irregular access to pages whose homes are busy computing.
    On,
    /// Never: regular kernels that [`Dsm::prefetch`] after each barrier.
    Off,
}

impl Progress {
    /// Whether to run the thread with `local` processes of the job on this node.
    fn wanted(self, local: usize) -> bool {
        match self {
            Progress::On => true,
            Progress::Off => false,
            Progress::Auto => {
                local > std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            }
        }
    }
}

impl DsmConfig {
    /// A region of `bytes` on the IA `spec`; the barrier's defaults and
    /// [`Progress::Auto`].
    pub fn new(spec: impl Into<String>, bytes: usize) -> DsmConfig {
        DsmConfig {
            spec: spec.into(),
            bytes,
            barrier: BarrierConfig::default(),
            progress: Progress::Auto,
            shm: true,
            bind: Bind::Auto,
        }
    }
}

/// How page data goes to a home: the EP, the local LMR, the home's context.
type DataPath<'a> = (&'a Arc<dyn Ep>, &'a Arc<dyn Lmr>, RmrContext);

/// Where a page's copy stands in this process.
pub(crate) enum Page {
    /// No copy (or a stale one): the next access fetches it from home.
    Invalid,
    /// A copy equal to home's when it was fetched or last sent home.
    Clean,
    /// A written copy and its twin (the copy as it was before the first write).
    Dirty(Box<[u8]>),
    /// An RDMA read into the copy is in flight (the DTO's cookie).
    Fetching(u64),
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
    /// Lock acquisitions.
    pub lock_acquired: AtomicU64,
    /// Failed compare-and-swap attempts while taking a lock.
    pub lock_retries: AtomicU64,
}

/// The sync area (pages `0..sync_pages`, homed at rank 0): lock words, the
/// counter, and two rounds of reduction slots. Lock words and the counter
/// are only ever touched by the backend's atomics.
pub(crate) const LOCK_SLOTS: u64 = 256;
pub(crate) const COUNTER_OFF: u64 = 8 * LOCK_SLOTS;
/// Reduction slots: round `k % 2`, rank `r` at `REDUCE_OFF + (k % 2 * n + r) * 8`.
pub(crate) const REDUCE_OFF: u64 = PAGE as u64;
const _: () = assert!(COUNTER_OFF + 8 <= REDUCE_OFF, "the lock words and the counter fit page 0");

/// Pages of the sync area for `n` processes.
fn sync_pages(n: usize) -> usize {
    1 + (16 * n).div_ceil(PAGE)
}

/// One shared address space across the processes of a job.
pub struct Dsm {
    pub(crate) boot: Bootstrap,
    pub(crate) mesh: Mesh,
    pub(crate) me: usize,
    pub(crate) n: usize,
    /// User bytes (addresses `0..len`).
    len: usize,
    /// Pages of the sync area; region page `sync + u` holds user page `u`.
    sync: usize,
    /// User pages.
    upages: usize,
    pub(crate) home: Arc<MemRegion>,
    home_lmr: Arc<dyn Lmr>,
    /// The home region on every IA (kept registered).
    _home_reg: Registered,
    pub(crate) cache: Arc<MemRegion>,
    pub(crate) cache_lmr: Arc<dyn Lmr>,
    /// The cache region on every IA: page data to a process of this node
    /// goes through its shm LMR.
    pub(crate) cache_reg: Registered,
    /// Every process's home region, as its network keys reach it.
    pub(crate) ctxs: Vec<RmrContext>,
    /// The same through shared memory, for the processes of this node.
    shm_ctxs: Vec<Option<RmrContext>>,
    pages: Vec<Mutex<Page>>,
    /// The remote pages that may hold a copy (each pushed when a fetch
    /// leaves `Invalid`): what a release or an acquire walks, so its cost
    /// grows with the pages this process touched, not with the region.
    copies: Mutex<Vec<usize>>,
    /// The home of every region page: the sync area is rank 0's; user
    /// pages are dealt out in blocks over the region, and [`Dsm::alloc`]
    /// deals each array's own pages out in blocks again, so block `i` of
    /// an array (what [`Dsm::share`] gives process `i`) lives at process `i`.
    homes: Vec<AtomicU32>,
    pub(crate) barrier: Mutex<Barrier>,
    pub(crate) stats: Stats,
    /// Where [`Dsm::alloc`] hands out next (user address).
    pub(crate) alloc_next: Mutex<usize>,
    /// Reductions done (their slots alternate between two rounds).
    pub(crate) reductions: AtomicU64,
    /// A failure no caller could be told of (a lock guard's release in
    /// `drop`): the next barrier or lock reports it.
    pub(crate) deferred: Mutex<Option<DsmError>>,
    /// Why this process no longer takes part in the job's synchronisation,
    /// once a barrier, lock or release failed (see [`Dsm::barrier`]).
    pub(crate) failed: Mutex<Option<String>>,
    /// The lock words this process's threads hold (see [`Dsm::lock`]).
    pub(crate) held: Held,
    /// Where this process runs (see [`Dsm::binding`]).
    binding: String,
}

/// The lock words this process's threads hold: word -> (the thread, the
/// names it holds the word for, as their 64-bit hashes). A thread that
/// holds a word takes it for another name that shares it without an
/// atomic; another thread of this process waits here, not on the word at
/// rank 0 (see [`Dsm::lock`]).
#[derive(Default)]
pub(crate) struct Held {
    pub(crate) words: Mutex<HashMap<u64, (ThreadId, Vec<u64>)>>,
    pub(crate) freed: Condvar,
}

impl Dsm {
    /// Joins the job (bootstrap from the environment: `mpirun`, or
    /// `RMR_RANK`/`RMR_SIZE`/`RMR_ROOT`), connects every process to every
    /// other and to itself, registers the region once and exchanges its
    /// RMR contexts. Ends with a barrier.
    ///
    /// # Errors
    /// Bootstrap, connection and registration failures.
    pub fn join(cfg: &DsmConfig) -> Result<Dsm> {
        let boot = Bootstrap::from_env()?;
        // Whether a progress thread is wanted, from the CPUs this process
        // may use before it is bound to its share of them.
        let helper = cfg.progress.wanted(boot.local_size());
        // Bound before the IA starts its threads (they stay with us).
        let bind = bind_setting(cfg.bind)?;
        let binding = bind_process(bind, boot.local_rank(), boot.local_size());
        tracing::debug!(target: "rmr::dsm", rank = boot.rank(), %binding, "placement");
        let ia = rmr::open(&cfg.spec)?;
        let (me, n) = (boot.rank(), boot.size());
        let upages = cfg.bytes.div_ceil(PAGE).max(1);
        let sync = sync_pages(n);
        let region = (sync + upages) * PAGE;
        let fabric = Fabric::open(&boot, ia.clone(), cfg.shm)?;
        let mesh = Mesh::connect(&boot, fabric, helper)?;
        // Pages are fetched from and flushed to their homes: in shared
        // memory, the processes of this node do it with a plain copy.
        let home = if mesh.fabric.shm_ia().is_some() {
            MemRegion::shared(region)?
        } else {
            MemRegion::new(region)
        };
        let home_reg = mesh.fabric.register(&home, Access::ALL)?;
        let home_lmr = home_reg.net().clone();
        let cache = MemRegion::new(region);
        let cache_reg = mesh.fabric.register(&cache, Access::LOCAL_WRITE)?;
        let cache_lmr = cache_reg.net().clone();
        let given = Mesh::exchange(&boot, &home_reg.context()?)?;
        // Every peer's network keys, and the shm key of this node's others.
        let ctxs =
            given.iter().map(|c| mesh.fabric.net_context(c)).collect::<rmr::Result<Vec<_>>>()?;
        let shm_ctxs = given
            .iter()
            .enumerate()
            .map(|(p, c)| {
                mesh.fabric.uses_shm(p).then(|| mesh.fabric.context_for(c, p)).transpose()
            })
            .collect::<rmr::Result<Vec<_>>>()?;
        let barrier = Barrier::new(&boot, &ia, &cfg.barrier)?;
        let pages = (0..sync + upages).map(|_| Mutex::new(Page::Invalid)).collect();
        let homes = (0..sync + upages)
            .map(|p| AtomicU32::new(if p < sync { 0 } else { ((p - sync) * n / upages) as u32 }))
            .collect();
        let dsm = Dsm {
            boot,
            mesh,
            me,
            n,
            len: upages * PAGE,
            sync,
            upages,
            home,
            home_lmr,
            _home_reg: home_reg,
            cache,
            cache_lmr,
            cache_reg,
            ctxs,
            shm_ctxs,
            pages,
            copies: Mutex::new(Vec::new()),
            homes,
            barrier: Mutex::new(barrier),
            stats: Stats::default(),
            alloc_next: Mutex::new(0),
            reductions: AtomicU64::new(0),
            deferred: Mutex::new(None),
            failed: Mutex::new(None),
            held: Default::default(),
            binding,
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

    /// Where this process runs (see [`Bind`]): `cores 0-0 of 2`, or
    /// `unbound (why)`.
    pub fn binding(&self) -> &str {
        &self.binding
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

    /// The home process of region page `p`.
    fn home_of(&self, p: usize) -> usize {
        self.homes[p].load(Ordering::Relaxed) as usize
    }

    /// Deals the pages of user bytes `[addr, addr+len)` out in blocks over
    /// the processes (what [`Dsm::alloc`] does for a new array; every
    /// process does the same, in the same order, before any access).
    pub(crate) fn deal_homes(&self, addr: usize, len: usize) {
        let first = self.sync + addr / PAGE;
        let count = len.div_ceil(PAGE);
        for k in 0..count {
            self.homes[first + k].store((k * self.n / count) as u32, Ordering::Relaxed);
        }
    }

    /// The user addresses homed at this process (a [`Dsm::share`] of the
    /// region is about the same block).
    pub fn my_home(&self) -> Range<usize> {
        let mine = |u: &usize| self.home_of(self.sync + u) == self.me;
        let first = (0..self.upages).find(mine);
        let last = (0..self.upages).rev().find(mine);
        match (first, last) {
            (Some(a), Some(b)) => a * PAGE..(b + 1) * PAGE,
            _ => 0..0,
        }
    }

    pub(crate) fn check(&self, addr: usize, len: usize) -> Result<()> {
        match addr.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(DsmError::OutOfRange { addr, len, size: self.len }),
        }
    }

    /// Splits user bytes `[addr, addr+len)` into (region page, offset in
    /// page, length), in ascending page order.
    fn chunks(&self, addr: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        let start = self.sync * PAGE + addr;
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

    /// The pages of user bytes `[addr, addr+len)` homed elsewhere, each
    /// once, ascending.
    fn remote_pages(&self, addr: usize, len: usize) -> impl Iterator<Item = usize> {
        self.chunks(addr, len).map(|(p, _, _)| p).filter(|&p| self.home_of(p) != self.me)
    }

    /// Locks the state of every remote page of `[addr, addr+len)` (in
    /// ascending order, so two callers never wait on each other in a
    /// cycle) and fetches the invalid ones, all reads in flight at once
    /// (and waits for those a prefetch started).
    fn hold(&self, addr: usize, len: usize) -> Result<Vec<(usize, MutexGuard<'_, Page>)>> {
        let mut held: Vec<_> = self
            .remote_pages(addr, len)
            .map(|p| (p, self.pages[p].lock().unwrap_or_else(|e| e.into_inner())))
            .collect();
        for (p, st) in &mut held {
            if matches!(**st, Page::Invalid) {
                self.post_fetch(*p, st)?;
            }
        }
        self.settle(&mut held)?;
        Ok(held)
    }

    /// The EP, the cache's LMR and the home's context for page data to
    /// `home`: over shared memory to a process of this node (its shm key),
    /// else over the network.
    fn data_path(&self, home: usize) -> Result<DataPath<'_>> {
        match (self.mesh.data_ep(home)?, self.shm_ctxs.get(home).copied().flatten()) {
            ((ep, true), Some(ctx)) => {
                Ok((ep, self.cache_reg.lmr_for(&self.mesh.fabric, home), ctx))
            }
            ((ep, _), _) => Ok((ep, &self.cache_lmr, self.ctxs[home])),
        }
    }

    /// Posts the RDMA read of remote page `p` into its copy (state lock
    /// held): the page is `Fetching` until someone settles it.
    fn post_fetch(&self, p: usize, st: &mut Page) -> Result<()> {
        let home = self.home_of(p);
        let off = (p * PAGE) as u64;
        let (ep, lmr, ctx) = self.data_path(home)?;
        let sge = [Sge::new(&**lmr, off, PAGE as u64)];
        let c = self.mesh.cookie();
        // Listed before the read goes out: an acquire another thread makes
        // meanwhile finds the page (and waits for its read, then drops the
        // copy), where a page listed after the post could keep data read
        // before that acquire. A page listed whose read was refused is
        // still `Invalid`, which a walk passes over.
        self.copies.lock().unwrap_or_else(|e| e.into_inner()).push(p);
        self.mesh.post(|| ep.post_rdma_read(&sge, ctx.at(off), Cookie(c), DtoFlags::empty()))?;
        *st = Page::Fetching(c);
        self.stats.pages_fetched.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Waits for the reads of the `Fetching` pages among `held` (all at
    /// once): they become clean copies (or invalid ones, if a read failed).
    fn settle(&self, held: &mut [(usize, MutexGuard<'_, Page>)]) -> Result<()> {
        let cookies: Vec<u64> = held
            .iter()
            .filter_map(|(_, st)| match **st {
                Page::Fetching(c) => Some(c),
                _ => None,
            })
            .collect();
        if cookies.is_empty() {
            return Ok(());
        }
        let r = self.mesh.wait_all(&cookies);
        for (_, st) in held.iter_mut() {
            if matches!(**st, Page::Fetching(_)) {
                **st = if r.is_ok() { Page::Clean } else { Page::Invalid };
            }
        }
        r.map(|_| ())
    }

    /// Starts fetching the remote pages of user bytes `[addr, addr+len)`
    /// that this process holds no copy of, without waiting: a later access
    /// finds them landed (or waits for the rest). For the pages a loop is
    /// about to read from other processes (the halo of a stencil), posted
    /// right after a barrier while the peers are still in the runtime.
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], or a failed post.
    pub fn prefetch(&self, addr: usize, len: usize) -> Result<()> {
        self.check(addr, len)?;
        for p in self.remote_pages(addr, len) {
            let mut st = self.pages[p].lock().unwrap_or_else(|e| e.into_inner());
            if matches!(*st, Page::Invalid) {
                self.post_fetch(p, &mut st)?;
            }
        }
        Ok(())
    }

    /// Where this process keeps page `p`'s bytes: its home memory for the
    /// pages homed here, its copies for the others.
    fn bytes_of(&self, p: usize) -> &MemRegion {
        if self.home_of(p) == self.me { &self.home } else { &self.cache }
    }

    /// Copies `buf.len()` shared bytes at `addr` into `buf`.
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], or a failed fetch.
    pub fn read(&self, addr: usize, buf: &mut [u8]) -> Result<()> {
        self.check(addr, buf.len())?;
        let held = self.hold(addr, buf.len())?;
        let mut at = 0;
        for (p, off, n) in self.chunks(addr, buf.len()) {
            self.bytes_of(p).read((p * PAGE + off) as u64, &mut buf[at..at + n])?;
            at += n;
        }
        drop(held);
        Ok(())
    }

    /// Writes `data` into the shared region at `addr` (visible to others
    /// after this process's next release: [`Dsm::barrier`], or dropping a
    /// lock guard).
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], or a failed fetch.
    pub fn write(&self, addr: usize, data: &[u8]) -> Result<()> {
        self.check(addr, data.len())?;
        let mut held = self.hold(addr, data.len())?;
        for (p, st) in &mut held {
            if matches!(**st, Page::Clean) {
                let twin = self.cache.to_vec((*p * PAGE) as u64, PAGE)?;
                **st = Page::Dirty(twin.into_boxed_slice());
            }
        }
        let mut at = 0;
        for (p, off, n) in self.chunks(addr, data.len()) {
            self.bytes_of(p).write((p * PAGE + off) as u64, &data[at..at + n])?;
            at += n;
        }
        drop(held);
        Ok(())
    }

    /// Sends the diff of every dirty copy to its page's home, every run in
    /// flight at once (per home, the runs before the last go suppressed;
    /// the last, signalled, completes after them), and waits until all of
    /// it has landed. With `drop_copies` (acquire), every copy is dropped
    /// too, so later reads fetch fresh pages; without (release), written
    /// copies stay as clean ones. A copy is never dropped before its diff
    /// went home: writes made before an acquire are kept.
    ///
    /// A page whose runs are in flight stays locked until they landed: its
    /// copy is where they are sent from, so no other thread of this
    /// process may fetch into it or write it meanwhile. It stays `Dirty`
    /// (with its twin) until then, and stays so if the release fails: the
    /// next release sends its diff again (a diff carries the bytes
    /// themselves, so sending one twice changes nothing), and no write is
    /// lost to a failed one.
    pub(crate) fn sync_copies(&self, drop_copies: bool) -> Result<()> {
        let mut last: Vec<Option<(u64, u64)>> = vec![None; self.n];
        let mut list = {
            let mut c = self.copies.lock().unwrap_or_else(|e| e.into_inner());
            if drop_copies { std::mem::take(&mut *c) } else { c.clone() }
        };
        list.sort_unstable();
        list.dedup();
        // Locked in ascending order, as `hold` locks them: two threads never
        // wait on each other in a cycle.
        let mut sent: Vec<MutexGuard<'_, Page>> = Vec::new();
        let mut failed = None;
        for &p in &list {
            if let Err(e) = self.sync_page(p, drop_copies, &mut last, &mut sent) {
                failed = Some(e);
                break;
            }
        }
        // Each home's last run goes signalled, also after a failure: its
        // completion tells that the suppressed runs before it are done with
        // the copies they are sent from, before those copies are unlocked.
        let mut cookies = Vec::new();
        for (home, l) in last.into_iter().enumerate() {
            if let Some((off, len)) = l {
                let posted = self.data_path(home).and_then(|(ep, lmr, ctx)| {
                    let sge = [Sge::new(&**lmr, off, len)];
                    let c = self.mesh.cookie();
                    self.mesh.post(|| {
                        ep.post_rdma_write(&sge, ctx.at(off), Cookie(c), DtoFlags::empty())
                    })?;
                    Ok(c)
                });
                match posted {
                    Ok(c) => cookies.push(c),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
        }
        if let Err(e) = self.mesh.wait_all(&cookies) {
            failed = failed.or(Some(e));
        }
        if let Some(e) = failed {
            if drop_copies {
                // Still copies (dirty ones among them) to walk at the next
                // acquire; a page dropped already is passed over then.
                self.copies.lock().unwrap_or_else(|e| e.into_inner()).extend(&list);
            }
            return Err(e);
        }
        for st in &mut sent {
            **st = if drop_copies { Page::Invalid } else { Page::Clean };
        }
        Ok(())
    }

    /// [`Dsm::sync_copies`] for remote page `p`: a fetch in flight lands;
    /// a dirty copy's runs are posted (each home's last run is left in
    /// `last`, to go signalled) and its state lock goes to `sent`, held and
    /// still `Dirty`, before the first run is posted (the caller settles
    /// it once the runs landed, or keeps it dirty if they failed); else,
    /// with `drop_copies`, the copy is dropped.
    fn sync_page<'a>(
        &'a self,
        p: usize,
        drop_copies: bool,
        last: &mut [Option<(u64, u64)>],
        sent: &mut Vec<MutexGuard<'a, Page>>,
    ) -> Result<()> {
        let mut st = self.pages[p].lock().unwrap_or_else(|e| e.into_inner());
        if let Page::Fetching(c) = *st {
            // A prefetch in flight lands before the copy is dropped or kept.
            let r = self.mesh.wait_all(&[c]);
            *st = if r.is_ok() { Page::Clean } else { Page::Invalid };
            r?;
        }
        let base = (p * PAGE) as u64;
        let runs = match &*st {
            Page::Dirty(twin) => {
                self.stats.whole_page_bytes.fetch_add(PAGE as u64, Ordering::Relaxed);
                diff_runs(twin, &self.cache.to_vec(base, PAGE)?)
            }
            _ => Vec::new(),
        };
        if runs.is_empty() {
            if matches!(*st, Page::Dirty(_)) {
                *st = Page::Clean;
            }
            if drop_copies {
                *st = Page::Invalid;
            }
            return Ok(());
        }
        let home = self.home_of(p);
        let (ep, lmr, ctx) = self.data_path(home)?;
        sent.push(st);
        for run in runs {
            if let Some((off, len)) = last[home] {
                let sge = [Sge::new(&**lmr, off, len)];
                self.mesh.post(|| {
                    ep.post_rdma_write(&sge, ctx.at(off), Cookie(0), DtoFlags::SUPPRESS)
                })?;
            }
            let off = base + run.start as u64;
            last[home] = Some((off, run.len() as u64));
            self.stats.diff_bytes.fetch_add(run.len() as u64, Ordering::Relaxed);
            self.stats.diff_runs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The RMR context of this process's home memory (for diagnostics: it
    /// is what the other processes target).
    pub fn home_context(&self) -> RmrContext {
        self.home_lmr.rmr_context()
    }

    /// The IA's attributes (provider, rails).
    pub fn ia_attr(&self) -> rmr::IaAttr {
        self.mesh.ia.attr().clone()
    }
}

/// `RMR_DSM_BIND` (`auto` or `off`) over the configured [`Bind`].
fn bind_setting(configured: Bind) -> Result<Bind> {
    match std::env::var("RMR_DSM_BIND").as_deref() {
        Err(_) => Ok(configured),
        Ok("auto") => Ok(Bind::Auto),
        Ok("off") => Ok(Bind::Off),
        Ok(v) => Err(DsmError::Config(format!("RMR_DSM_BIND={v}: expected auto or off"))),
    }
}

/// Block `me` of `n` of `range`.
pub(crate) fn share(range: Range<usize>, me: usize, n: usize) -> Range<usize> {
    // In 128 bits: `len * (me + 1)` overflows a usize for large ranges.
    let len = range.end.saturating_sub(range.start) as u128;
    let at = |k: usize| range.start + (len * k as u128 / n as u128) as usize;
    at(me)..at(me + 1)
}

/// The runs of bytes where `now` differs from `twin`. Only changed bytes
/// are sent: a gap of unchanged bytes between two runs may hold another
/// process's concurrent write to the same page (false sharing), which a
/// merged run would overwrite with this process's stale copy.
pub(crate) fn diff_runs(twin: &[u8], now: &[u8]) -> Vec<Range<usize>> {
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
        runs.push(start..i);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_carry_changed_bytes_only() {
        let twin = vec![0u8; 100];
        let mut now = twin.clone();
        now[3] = 1;
        now[10] = 1; // close to the first, still its own run: bytes 4..10
        // may be another process's writes
        now[60] = 2;
        now[61] = 2;
        now[99] = 3;
        assert_eq!(diff_runs(&twin, &now), vec![3..4, 10..11, 60..62, 99..100]);
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
    fn the_sync_area_has_room_for_two_rounds_of_reduction_slots() {
        for n in [1, 2, 255, 256, 257, 1000] {
            let room = (sync_pages(n) * PAGE) as u64 - REDUCE_OFF;
            assert!(room >= 16 * n as u64, "{n} processes");
        }
        const { assert!(COUNTER_OFF + 8 <= REDUCE_OFF) };
    }
}
