//! A barrier across both clusters: dissemination (round `k` sends to rank
//! `me + 2^k` and waits for rank `me - 2^k`, modulo the world size) over
//! sends on the world's endpoints, so it runs the same whether a peer is
//! direct or behind a bridge. After `ceil(log2 N)` rounds every process has
//! heard, transitively, from every other: nobody leaves before everybody
//! entered.

use crate::error::Result;
use crate::join::{Peer, World};
use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, Error, Event, Lmr, MemRegion, Sge, Status};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLOTS: u64 = 4;

struct Round {
    to: Arc<Peer>,
    from: Arc<Peer>,
    sbuf: Arc<MemRegion>,
    slmr: Arc<dyn Lmr>,
    rbuf: Arc<MemRegion>,
    rlmr: Arc<dyn Lmr>,
    got: u64,
}

/// A reusable barrier over a [`World`].
pub struct Barrier {
    rounds: Vec<Round>,
    epoch: u64,
}

impl Barrier {
    /// Connects to the peers of every round and posts the receives.
    ///
    /// # Errors
    /// A peer could not be reached.
    pub fn new(world: &World) -> Result<Barrier> {
        let n = world.size() as u64;
        let me = u64::from(world.rank());
        let mut rounds = Vec::new();
        let mut d = 1;
        while d < n {
            let to = ((me + d) % n) as u32;
            let from = ((me + n - d) % n) as u32;
            // Connect in rank order on both ends' sides so nobody waits on itself.
            let (to, from) = if to < from {
                let t = world.ep(to)?;
                (t, world.ep(from)?)
            } else {
                let f = world.ep(from)?;
                (world.ep(to)?, f)
            };
            let sbuf = MemRegion::new(8);
            let slmr = to.pz.register_all(&sbuf, Access::empty())?;
            let rbuf = MemRegion::new((8 * SLOTS) as usize);
            let rlmr = from.pz.register_all(&rbuf, Access::LOCAL_WRITE)?;
            for s in 0..SLOTS {
                from.ep.post_recv(&[Sge::new(&*rlmr, 8 * s, 8)], Cookie(s), DtoFlags::empty())?;
            }
            rounds.push(Round { to, from, sbuf, slmr, rbuf, rlmr, got: 0 });
            d *= 2;
        }
        Ok(Barrier { rounds, epoch: 0 })
    }

    /// One barrier.
    ///
    /// # Errors
    /// A failed send or receive, or no word from a peer within `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<()> {
        self.epoch += 1;
        let deadline = Instant::now() + timeout;
        for r in &mut self.rounds {
            r.sbuf.store_u64(0, self.epoch)?;
            r.to.ep.post_send(&[Sge::whole(&*r.slmr)], Cookie(u64::MAX), DtoFlags::SUPPRESS)?;
            while r.got < self.epoch {
                let left = deadline.saturating_duration_since(Instant::now());
                match r.from.evd.wait(Some(left), 1)? {
                    Event::Dto(c) if c.cookie.0 < SLOTS => {
                        c.result().map_err(|e| {
                            Error::Broken(format!("barrier round from rank {}: {e}", r.from.rank))
                        })?;
                        r.got += 1;
                        r.from.ep.post_recv(
                            &[Sge::new(&*r.rlmr, 8 * c.cookie.0, 8)],
                            c.cookie,
                            DtoFlags::empty(),
                        )?;
                    }
                    // A send whose peer already left completes flushed: it was delivered
                    // (the peer could not leave without it); a broken link fails the receives.
                    Event::Dto(c) if c.status == Status::Flushed => {}
                    Event::Dto(c) => c.result()?,
                    Event::Broken { reason, .. } => return Err(Error::Broken(reason).into()),
                    Event::Disconnected { .. } => return Err(Error::NotConnected.into()),
                    _ => {}
                }
            }
            let _ = &r.rbuf;
        }
        Ok(())
    }
}
