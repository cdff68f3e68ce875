//! How a barrier step reaches its partner: by RDMA-writing the sequence
//! number into the partner's slot ([`RdmaSignals`], Gupta et al.), or by
//! sending it ([`MsgSignals`], the baseline). Both post the number from a
//! source word chosen by the barrier's parity: a write of barrier `s` may
//! read its source as late as it lands, and the word is rewritten only at
//! barrier `s + 2`, by when every partner has seen barrier `s`'s signals
//! (all entered `s + 1`, so all left `s`). A single word would let a late
//! write carry `s + 1` and release a partner from barrier `s + 1` early
//! (the schedule's model test shows it).

use crate::links::Links;
use crate::schedule::Step;
use crate::wait::{Waiter, stray};
use crate::{Error, Result};
use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, DtoOp, Event, Lmr, MemRegion, Pz, RmrContext, Sge};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes between two words of the barrier's regions (a cache line each).
const STRIDE: u64 = 64;
/// Receives kept posted per partner by the send/recv barrier (a sender is
/// at most two barriers ahead of its receiver's reposting).
const RECVS: u64 = 4;

/// Signal and wait primitives of one barrier algorithm.
pub(crate) trait Signals: Send {
    /// Starts barrier `seq`.
    fn begin(&mut self, seq: u64);
    /// Tells member `to` that this process reached this step of barrier `seq`.
    fn signal(&mut self, to: usize, seq: u64) -> Result<()>;
    /// Waits until member `from` reached its matching step of barrier `seq`.
    fn wait(&mut self, from: usize, seq: u64) -> Result<()>;
}

/// Runs one barrier's rounds.
pub(crate) fn run(steps: &[Step], s: &mut dyn Signals, seq: u64) -> Result<()> {
    s.begin(seq);
    for st in steps {
        if let Some(to) = st.signal {
            s.signal(to, seq)?;
        }
        if let Some(from) = st.wait {
            s.wait(from, seq)?;
        }
    }
    Ok(())
}

/// The double-buffered source words, registered for local reads.
struct Source {
    region: Arc<MemRegion>,
    lmr: Arc<dyn Lmr>,
}

impl Source {
    fn new(pz: &Arc<dyn Pz>) -> Result<Source> {
        let region = MemRegion::new(2 * STRIDE as usize);
        let lmr = pz.register_all(&region, Access::LOCAL_WRITE)?;
        Ok(Source { region, lmr })
    }
    fn set(&self, seq: u64) {
        let _ = self.region.store_u64((seq & 1) * STRIDE, seq);
    }
    fn sge(&self, seq: u64) -> Sge<'_> {
        Sge::new(&*self.lmr, (seq & 1) * STRIDE, 8)
    }
}

/// Retries a post while the send queue is full, making progress meanwhile;
/// events dequeued then are left in `stash` for the caller.
fn post_retrying(
    waiter: &Waiter,
    links: &Links,
    to: usize,
    stash: &mut Vec<Event>,
    mut post: impl FnMut() -> rmr_api::Result<()>,
) -> Result<()> {
    let deadline = Instant::now() + waiter.timeout;
    let mut retries = 0u64;
    loop {
        match post() {
            Ok(()) => {
                if retries > 0 {
                    tracing::debug!(target: "rmr::coll", rank = links.ranks[to], retries, "post retried");
                }
                return Ok(());
            }
            Err(rmr_api::Error::QueueFull) if Instant::now() < deadline => {
                retries += 1;
                if retries == 1 {
                    tracing::debug!(target: "rmr::coll", rank = links.ranks[to], "send queue full; retrying");
                }
                waiter.progress(stash);
                // Drive the EVD (completions free the queue), never sleep.
                waiter.drive_for(Duration::from_micros(100));
            }
            Err(e) => return Err(Error::Link { rank: links.ranks[to], why: e.to_string() }),
        }
    }
}

/// The word of a slot that barrier `seq` writes: one per parity, so that
/// two writes in flight to one slot (consecutive barriers) never target the
/// same word, even on a transport that lets them overtake each other; a
/// word is written again two barriers later, after its reader saw it.
fn slot_word(seq: u64) -> u64 {
    (seq & 1) * 8
}

/// The slots peers write into: one per member, one cache line each, two
/// words each (see [`slot_word`]).
pub(crate) struct Slots {
    pub(crate) region: Arc<MemRegion>,
    _lmr: Arc<dyn Lmr>,
    /// What peers need to write here (exchanged through the bootstrap).
    pub(crate) ctx: RmrContext,
}

impl Slots {
    pub(crate) fn new(pz: &Arc<dyn Pz>, members: usize) -> Result<Slots> {
        let region = MemRegion::new(members.max(1) * STRIDE as usize);
        let lmr = pz.register_all(&region, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let ctx = lmr.rmr_context();
        Ok(Slots { region, _lmr: lmr, ctx })
    }
}

/// Gupta et al.'s signals: an RDMA write of the sequence number into the
/// partner's slot for this process; the partner polls its own memory for
/// a value `>=` the number it expects.
pub(crate) struct RdmaSignals {
    links: Links,
    waiter: Waiter,
    slots: Slots,
    src: Source,
    peers: Vec<Option<RmrContext>>,
}

impl RdmaSignals {
    pub(crate) fn new(
        links: Links,
        waiter: Waiter,
        pz: &Arc<dyn Pz>,
        slots: Slots,
    ) -> Result<Self> {
        let mut peers = vec![None; links.ranks.len()];
        for (p, ep) in links.eps.iter().enumerate() {
            if ep.is_some() {
                peers[p] = Some(RmrContext::from_bytes(&links.extra[p]).map_err(|e| {
                    Error::Setup(format!("rank {}'s slot context: {e}", links.ranks[p]))
                })?);
            }
        }
        Ok(RdmaSignals { src: Source::new(pz)?, links, waiter, slots, peers })
    }
}

impl Signals for RdmaSignals {
    fn begin(&mut self, seq: u64) {
        self.src.set(seq);
    }

    fn signal(&mut self, to: usize, seq: u64) -> Result<()> {
        let ep = self.links.ep(to)?;
        let ctx = self.peers[to].as_ref().expect("partner context");
        let off = self.links.me as u64 * STRIDE + slot_word(seq);
        let sge = [self.src.sge(seq)];
        let mut stash = Vec::new();
        post_retrying(&self.waiter, &self.links, to, &mut stash, || {
            ep.post_rdma_write(&sge, ctx.at(off), Cookie(seq), DtoFlags::SUPPRESS)
        })?;
        for e in stash {
            stray(e, &|ep| self.links.rank_of(ep))?;
        }
        Ok(())
    }

    fn wait(&mut self, from: usize, seq: u64) -> Result<()> {
        let slot = self
            .slots
            .region
            .atomic_u64(from as u64 * STRIDE + slot_word(seq))
            .map_err(Error::Api)?;
        let arrived = || u64::from_le(slot.load(std::sync::atomic::Ordering::Acquire)) >= seq;
        let links = &self.links;
        if self.waiter.until(&arrived, &mut |e| stray(e, &|ep| links.rank_of(ep)))? {
            Ok(())
        } else {
            Err(Error::Timeout { seq, rank: links.ranks[from], after: self.waiter.timeout })
        }
    }
}

/// The baseline: the same schedule with the number sent as an 8-byte
/// message; each partner keeps [`RECVS`] receives posted.
pub(crate) struct MsgSignals {
    links: Links,
    waiter: Waiter,
    src: Source,
    bufs: Arc<MemRegion>,
    bufs_lmr: Arc<dyn Lmr>,
    /// Highest number received from each member.
    got: Vec<u64>,
}

impl MsgSignals {
    pub(crate) fn new(links: Links, waiter: Waiter, pz: &Arc<dyn Pz>) -> Result<Self> {
        let n = links.ranks.len();
        let bufs = MemRegion::new(n * (RECVS * STRIDE) as usize);
        let bufs_lmr = pz.register_all(&bufs, Access::LOCAL_WRITE)?;
        let s =
            MsgSignals { src: Source::new(pz)?, links, waiter, bufs, bufs_lmr, got: vec![0; n] };
        for (p, ep) in s.links.eps.iter().enumerate() {
            if ep.is_some() {
                for k in 0..RECVS {
                    s.repost(p, k)?;
                }
            }
        }
        Ok(s)
    }

    fn buf_off(p: usize, k: u64) -> u64 {
        (p as u64 * RECVS + k) * STRIDE
    }

    fn repost(&self, p: usize, k: u64) -> Result<()> {
        let sge = [Sge::new(&*self.bufs_lmr, Self::buf_off(p, k), 8)];
        self.links
            .ep(p)?
            .post_recv(&sge, Cookie((p as u64) << 8 | k), DtoFlags::empty())
            .map_err(|e| Error::Link { rank: self.links.ranks[p], why: e.to_string() })
    }

    fn handle(&mut self, e: Event) -> Result<()> {
        match e {
            Event::Dto(c) if c.op == DtoOp::Recv && c.status.is_ok() => {
                let (p, k) = ((c.cookie.0 >> 8) as usize, c.cookie.0 & 0xff);
                let v = self.bufs.load_u64(Self::buf_off(p, k)).map_err(Error::Api)?;
                self.got[p] = self.got[p].max(v);
                self.repost(p, k)
            }
            e => stray(e, &|ep| self.links.rank_of(ep)),
        }
    }
}

impl Signals for MsgSignals {
    fn begin(&mut self, seq: u64) {
        self.src.set(seq);
    }

    fn signal(&mut self, to: usize, seq: u64) -> Result<()> {
        let ep = self.links.ep(to)?;
        let sge = [self.src.sge(seq)];
        let mut stash = Vec::new();
        post_retrying(&self.waiter, &self.links, to, &mut stash, || {
            ep.post_send(&sge, Cookie(seq), DtoFlags::SUPPRESS)
        })?;
        for e in stash {
            self.handle(e)?;
        }
        Ok(())
    }

    fn wait(&mut self, from: usize, seq: u64) -> Result<()> {
        while self.got[from] < seq {
            match self.waiter.next_event() {
                Some(e) => self.handle(e)?,
                None => {
                    return Err(Error::Timeout {
                        seq,
                        rank: self.links.ranks[from],
                        after: self.waiter.timeout,
                    });
                }
            }
        }
        Ok(())
    }
}
