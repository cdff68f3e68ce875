//! Pages pushed by their homes after each barrier ([`Dsm::subscribe`]): an
//! update protocol beside the invalidating one, for the pages a process
//! reads from the same home in every interval (a stencil's halo).
//!
//! During a barrier's release, before it arrives, a subscriber posts a
//! receive into its copy of every page it subscribed to. Once the barrier
//! is passed (every diff of the interval is home), each home sends each of
//! its subscribed pages to every subscriber: the whole page, or an empty
//! message when the page is unchanged since its last full push. The access
//! that needs the page then waits at most for a message already under way,
//! where a read would wait for the home's thread to reach the network (on
//! a transport whose target side runs on the CPU) and for a round trip.

use super::runtime::{Dsm, Page};
use super::{DsmError, PAGE, Result};
use rmr::{Access, Cookie, DtoFlags, MemRegion, Sge};
use std::ops::Range;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

impl Dsm {
    /// Keeps this process's copies of the shared bytes `[addr, addr+len)`
    /// up to date without reads: after every [`Dsm::barrier`] (so after
    /// every [`Dsm::parallel_for`]), each of those pages' homes sends the
    /// page to every process that subscribed to it, and an access finds it
    /// there. For the pages a process reads from the same home in every
    /// interval, as a stencil's halo rows: the home sends them as soon as
    /// it leaves the barrier, where a read (or a [`Dsm::prefetch`]) waits
    /// for the home's thread to answer it. An unchanged page costs an
    /// empty message; a changed one a page's bytes, whether read or not.
    ///
    /// A collective: every process calls it at the same point between two
    /// barriers, each with the bytes it wants (an empty range is fine).
    /// The pushes start at the next barrier. Pages homed at the caller are
    /// left out. A subscription lasts until [`Dsm::unsubscribe`], or until
    /// a later [`Dsm::alloc`] deals its pages out again.
    ///
    /// ```no_run
    /// # fn f(dsm: &rmr_dsm::Dsm) -> rmr_dsm::Result<()> {
    /// let grid = dsm.alloc::<f64>(1024 * 512)?;
    /// let mine = dsm.share(0..1024);
    /// // The rows above and below this process's block, every iteration:
    /// let above = mine.start.saturating_sub(1) * 512;
    /// grid.subscribe(above..above + 512)?;
    /// grid.subscribe(mine.end.min(1023) * 512..(mine.end.min(1023) + 1) * 512)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], a failed exchange, a page number from a
    /// peer outside the region, or a failed registration of the memory
    /// full pushes are sent from.
    pub fn subscribe(&self, addr: usize, len: usize) -> Result<()> {
        self.check(addr, len)?;
        let mine: Vec<usize> = self.remote_pages(addr, len).collect();
        let theirs = self.exchange_pages(&mine)?;
        {
            let mut push = self.pushing.lock().unwrap_or_else(|e| e.into_inner());
            for (who, p) in theirs {
                push.add(p, who);
            }
            if !push.staged() {
                // The last push's sends still read the old staging memory.
                let inflight = std::mem::take(&mut push.inflight);
                self.mesh.wait_all(&inflight)?;
                let region = MemRegion::new(push.given.len() * PAGE);
                let reg = self.mesh.fabric.register(&region, Access::LOCAL_WRITE)?;
                push.stage = Some((region, reg));
            }
        }
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        for p in mine {
            wanted.pages.insert(p, self.home_of(p));
        }
        Ok(())
    }

    /// Ends this process's subscription to the pages of `[addr, addr+len)`
    /// ([`Dsm::subscribe`]). A collective like `subscribe`: every process
    /// calls it at the same point between two barriers, each with the
    /// bytes it no longer wants (an empty range is fine); from the next
    /// barrier on their homes stop pushing them. A push already under way
    /// still lands.
    ///
    /// # Errors
    /// [`DsmError::OutOfRange`], a failed exchange, or a page number from
    /// a peer outside the region.
    pub fn unsubscribe(&self, addr: usize, len: usize) -> Result<()> {
        self.check(addr, len)?;
        let mine: Vec<usize> = self.remote_pages(addr, len).collect();
        let theirs = self.exchange_pages(&mine)?;
        let mut push = self.pushing.lock().unwrap_or_else(|e| e.into_inner());
        for (who, p) in theirs {
            push.remove(p, who);
        }
        drop(push);
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        for p in mine {
            wanted.pages.remove(&p);
        }
        Ok(())
    }

    /// Tells every process the remote pages `mine` of a (un)subscription;
    /// returns the (process, page) pairs of the others' that are homed here.
    fn exchange_pages(&self, mine: &[usize]) -> Result<Vec<(usize, usize)>> {
        let card: Vec<u8> = mine.iter().flat_map(|&p| (p as u64).to_le_bytes()).collect();
        let cards = self.boot.allgather(&card)?;
        let mut here = Vec::new();
        for (who, card) in cards.iter().enumerate().filter(|(who, _)| *who != self.me) {
            for b in card.chunks_exact(8) {
                let p = u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
                if p >= self.pages.len() {
                    return Err(DsmError::Protocol(format!(
                        "rank {who} named page {p} of a {}-page region",
                        self.pages.len()
                    )));
                }
                if self.home_of(p) == self.me {
                    here.push((who, p));
                }
            }
        }
        Ok(here)
    }

    /// Stops pushing and awaiting pushes of the region pages `pages`.
    pub(crate) fn forget_pushes(&self, pages: Range<usize>) {
        self.wanted.lock().unwrap_or_else(|e| e.into_inner()).forget(&pages);
        self.pushing.lock().unwrap_or_else(|e| e.into_inner()).forget(&pages);
    }

    /// A barrier's release, before it arrives: a receive into the copy of
    /// every page subscribed to, for its home's push (the copy is
    /// [`Page::Pushed`] until the push lands).
    pub(crate) fn expect_pushes(&self) -> Result<()> {
        let wanted: Vec<(usize, usize)> = {
            let w = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
            w.pages.iter().map(|(&p, &home)| (p, home)).collect()
        };
        if wanted.is_empty() {
            return Ok(());
        }
        let mut posted = Vec::with_capacity(wanted.len());
        for (p, home) in wanted {
            let mut st = self.pages[p].lock().unwrap_or_else(|e| e.into_inner());
            if !matches!(*st, Page::Clean | Page::Invalid) {
                // The release just walked every copy: only a thread that
                // accessed the region during the barrier leaves one busy.
                return Err(DsmError::Protocol(format!(
                    "shared page {p} was accessed during a barrier"
                )));
            }
            let (ep, lmr, _) = self.data_path(home)?;
            let sge = [Sge::new(&**lmr, (p * PAGE) as u64, PAGE as u64)];
            let c = self.mesh.cookie();
            self.mesh.post(|| ep.post_recv(&sge, Cookie(c), DtoFlags::empty()))?;
            *st = Page::Pushed(c);
            posted.push(p);
        }
        self.copies.lock().unwrap_or_else(|e| e.into_inner()).extend(posted);
        Ok(())
    }

    /// After a barrier: sends every page homed here that others subscribed
    /// to, to each of them, from staging memory (so this process may write
    /// the page at once): in full, or empty when it equals the last full
    /// push. Pages go out in ascending order, the order in which each
    /// subscriber posted its receives.
    pub(crate) fn push(&self) -> Result<()> {
        let mut guard = self.pushing.lock().unwrap_or_else(|e| e.into_inner());
        let push = &mut *guard;
        if push.given.is_empty() {
            return Ok(());
        }
        // The last push's sends read the staging memory this one rewrites
        // (long done: a barrier has passed since).
        let prev = std::mem::take(&mut push.inflight);
        self.mesh.wait_all(&prev)?;
        let Some((stage, reg)) = &push.stage else {
            return Err(DsmError::Protocol("pushed pages without staging memory".into()));
        };
        let mut now = vec![0u8; PAGE];
        for (i, g) in push.given.iter_mut().enumerate() {
            self.home.read((g.page * PAGE) as u64, &mut now)?;
            let off = (i * PAGE) as u64;
            let full = g.last.as_deref() != Some(&now[..]);
            if full {
                stage.write(off, &now)?;
                match &mut g.last {
                    Some(last) => last.copy_from_slice(&now),
                    None => g.last = Some(now.clone().into_boxed_slice()),
                }
            }
            let counter =
                if full { &self.stats.pages_pushed } else { &self.stats.pushes_unchanged };
            for &who in &g.to {
                let (ep, shm) = self.route(who)?;
                let lmr = if shm { reg.lmr_for(&self.mesh.fabric, who) } else { reg.net() };
                let page = [Sge::new(&**lmr, off, PAGE as u64)];
                let sge: &[Sge<'_>] = if full { &page } else { &[] };
                let c = self.mesh.cookie();
                self.mesh.post(|| ep.post_send(sge, Cookie(c), DtoFlags::empty()))?;
                push.inflight.push(c);
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Waits for the pushes awaited among `held` (all at once) and settles
    /// them ([`Dsm::landed`]). Returns whether one left its copy invalid.
    pub(crate) fn land_pushes(&self, held: &mut [(usize, MutexGuard<'_, Page>)]) -> Result<bool> {
        let cookies: Vec<u64> = held
            .iter()
            .filter_map(|(_, st)| match **st {
                Page::Pushed(c) => Some(c),
                _ => None,
            })
            .collect();
        if cookies.is_empty() {
            return Ok(false);
        }
        let r = self.mesh.wait_all(&cookies);
        let mut got = r.as_ref().ok().map(|v| v.iter().map(|d| d.bytes));
        let mut invalid = false;
        for (p, st) in held.iter_mut().filter(|(_, st)| matches!(**st, Page::Pushed(_))) {
            match got.as_mut() {
                Some(bytes) => {
                    let b = bytes.next().unwrap_or(0);
                    self.landed(*p, st, Ok(b))?;
                    invalid |= matches!(**st, Page::Invalid);
                }
                None => **st = Page::Invalid,
            }
        }
        r.map(|_| invalid)
    }

    /// A push into the copy of page `p` ended, having brought `r` bytes: a
    /// whole page is the home's page as of the barrier (a clean copy); an
    /// empty message leaves the copy clean if it holds the last full push,
    /// else invalid (the access reads it). A failure leaves it invalid.
    pub(crate) fn landed(&self, p: usize, st: &mut Page, r: Result<u64>) -> Result<()> {
        match r {
            Ok(b) if b == PAGE as u64 => {
                self.fresh[p].store(true, Ordering::Relaxed);
                *st = Page::Clean;
            }
            Ok(0) if self.fresh[p].load(Ordering::Relaxed) => *st = Page::Clean,
            Ok(_) => {
                self.fresh[p].store(false, Ordering::Relaxed);
                *st = Page::Invalid;
            }
            Err(e) => {
                *st = Page::Invalid;
                return Err(e);
            }
        }
        Ok(())
    }
}
