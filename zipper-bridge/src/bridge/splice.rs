//! One bridged connection: a real endpoint to the client on each side,
//! a ring of bounce buffers per side (registered in both sides' zones),
//! and the per-pair forwarding state. Messages from one side are
//! forwarded to the other in arrival order (uDAPL's ordering rules hold
//! end to end because each direction is one FIFO over one real endpoint
//! on each side); a bounce buffer returns to its ring — and its credit to
//! its client — only once its chunk has landed on the far side.

use crate::chunk::OpTracker;
use crate::credit::Credits;
use crate::ring::Ring;
use crate::wire::{HDR, Header, Kind, flags};
use rmr_api::Cookie;
use rmr_api::{DtoFlags, Ep, Error, Lmr, MemRegion, Sge, Status};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// Cookie kinds on a splice's real endpoints.
pub(crate) const K_RECV: u64 = 1;
pub(crate) const K_DELIVER: u64 = 2;
pub(crate) const K_READDATA: u64 = 3;
pub(crate) const K_CTL: u64 = 4;
pub(crate) const K_WRITE: u64 = 5;
pub(crate) const K_READ: u64 = 6;

pub(crate) fn cookie(splice: u32, kind: u64, slot: usize) -> u64 {
    u64::from(splice) << 32 | kind << 24 | slot as u64
}

pub(crate) fn split(c: u64) -> (u32, u64, usize) {
    ((c >> 32) as u32, (c >> 24) & 0xff, (c & 0xff_ffff) as usize)
}

/// Store-and-forward progress of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sf {
    Idle,
    AwaitEcho(u64),
    Go(u64),
}

pub(crate) struct Link {
    pub(crate) credits: Credits,
    pub(crate) tracker: OpTracker,
    /// Slots of this side's ring waiting to be forwarded to the other side.
    pub(crate) fwd: VecDeque<usize>,
    /// Slots of this side's ring whose read data waits to go back to this side.
    pub(crate) outq: VecDeque<usize>,
    pub(crate) meta: Vec<Option<Header>>,
    pub(crate) free_ctl: Vec<usize>,
    /// This side's endpoint is connected (set-up done): messages may go to it.
    /// Until then, what the other side sends toward it waits in `fwd`.
    pub(crate) up: bool,
    pub(crate) ended: bool,
    /// Chunks from this side posted on the other side and not yet completed.
    pub(crate) out: usize,
    pub(crate) sf: Sf,
    /// This side ended and the other side was closed after its last message.
    pub(crate) passed_on: bool,
    pub(crate) msgs: u64,
    pub(crate) bytes: u64,
}

pub(crate) struct SpliceSt {
    pub(crate) link: [Link; 2],
}

pub(crate) struct Splice {
    pub(crate) id: u32,
    pub(crate) eps: [Arc<dyn Ep>; 2],
    pub(crate) rings: [Ring; 2],
    pub(crate) ctl: [(Arc<MemRegion>, Arc<dyn Lmr>); 2],
    pub(crate) sf: bool,
    pub(crate) st: Mutex<SpliceSt>,
}

pub(crate) const CTL_SLOTS: usize = 16;

fn post_status(e: &Error) -> Status {
    match e {
        Error::Broken(_) | Error::PeerStalled { .. } | Error::NotConnected | Error::Flushed => {
            Status::Broken
        }
        Error::Protection(_) => Status::Protection,
        Error::Unsupported(_) => Status::Unsupported,
        Error::Dto { status, .. } => *status,
        Error::OutOfBounds { .. } | Error::InvalidArgument(_) => Status::OutOfBounds,
        _ => Status::RemoteAccess,
    }
}

impl Link {
    pub(crate) fn new(credits: Credits, slots: usize) -> Link {
        Link {
            credits,
            tracker: OpTracker::default(),
            fwd: VecDeque::new(),
            outq: VecDeque::new(),
            meta: vec![None; slots],
            free_ctl: (0..CTL_SLOTS).collect(),
            up: false,
            ended: false,
            out: 0,
            sf: Sf::Idle,
            passed_on: false,
            msgs: 0,
            bytes: 0,
        }
    }
}

impl Splice {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SpliceSt> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Posts every slot of side `s`'s ring on its endpoint.
    pub(crate) fn post_ring(&self, s: usize) -> rmr_api::Result<()> {
        for i in 0..self.rings[s].n {
            self.rings[s].post(&*self.eps[s], 0, i, cookie(self.id, K_RECV, i))?;
        }
        Ok(())
    }

    fn repost(&self, st: &mut SpliceSt, s: usize, i: usize, data: bool) {
        st.link[s].meta[i] = None;
        if self.rings[s].post(&*self.eps[s], 0, i, cookie(self.id, K_RECV, i)).is_ok() {
            st.link[s].credits.reposted(data);
        }
    }

    /// Fills the header fields every message to side `s` carries.
    fn stamp(st: &mut SpliceSt, s: usize, h: &mut Header, data: bool) {
        let l = &mut st.link[s];
        (h.ret_data, h.ret_ctl) = if data { l.credits.send_data() } else { l.credits.send_ctl() };
        let (ack, err) = l.tracker.header_acks();
        h.ack = ack;
        if let Some((id, status)) = err {
            h.flags |= flags::ERR;
            h.err_id = id;
            h.status = status.code();
        }
    }

    /// A message from side `s` arrived in slot `i`.
    pub(crate) fn on_message(&self, st: &mut SpliceSt, s: usize, i: usize) {
        let o = 1 - s;
        let Some(h) = self.rings[s].header(i) else {
            self.repost(st, s, i, false);
            return;
        };
        st.link[s].credits.on_returns((h.ret_data, h.ret_ctl));
        crate::trace::line(|| {
            format!(
                "splice {} side{s} msg slot {i} {:?} id {} len {} flags {:#x} ret {}/{} -> data={} ctl={}",
                self.id,
                h.kind,
                h.id,
                h.len,
                h.flags,
                h.ret_data,
                h.ret_ctl,
                st.link[s].credits.data(),
                st.link[s].credits.ctl()
            )
        });
        if h.has(flags::ECHO_REPLY) {
            if let Sf::AwaitEcho(id) = st.link[o].sf {
                st.link[o].sf = Sf::Go(id);
            }
        }
        match h.kind {
            Kind::Send | Kind::Write | Kind::ReadReq => {
                let ok = st.link[s]
                    .tracker
                    .arrived(h.id, h.has(flags::LAST), h.has(flags::SIGNALLED))
                    .is_ok();
                if !ok || u64::from(h.len) + HDR as u64 > self.rings[s].slot {
                    // A protocol violation: nothing sane can follow on this connection.
                    let _ = self.eps[s].disconnect();
                    return;
                }
                st.link[s].meta[i] = Some(h);
                st.link[s].fwd.push_back(i);
                st.link[s].msgs += 1;
                st.link[s].bytes += u64::from(h.len);
            }
            _ => self.repost(st, s, i, false),
        }
    }

    /// A DTO posted on side `side`'s endpoint completed.
    pub(crate) fn on_completion(
        &self,
        st: &mut SpliceSt,
        side: usize,
        kind: u64,
        i: usize,
        status: Status,
    ) {
        let o = 1 - side;
        match kind {
            K_RECV if status.is_ok() => self.on_message(st, side, i),
            K_RECV => {}
            K_CTL => st.link[side].free_ctl.push(i),
            // A chunk from the other side landed here (or failed).
            K_DELIVER | K_WRITE => {
                let id = st.link[o].meta[i].map_or(u64::MAX, |h| h.id);
                st.link[o].tracker.chunk_done(id, status);
                st.link[o].out = st.link[o].out.saturating_sub(1);
                self.repost(st, o, i, true);
            }
            K_READ if status.is_ok() => st.link[o].outq.push_back(i),
            K_READ => {
                let id = st.link[o].meta[i].map_or(u64::MAX, |h| h.id);
                st.link[o].tracker.chunk_done(id, status);
                st.link[o].out = st.link[o].out.saturating_sub(1);
                self.repost(st, o, i, true);
            }
            K_READDATA => {
                let id = st.link[side].meta[i].map_or(u64::MAX, |h| h.id);
                st.link[side].tracker.chunk_done(id, status);
                st.link[side].out = st.link[side].out.saturating_sub(1);
                self.repost(st, side, i, true);
            }
            _ => {}
        }
    }

    /// Forwards the front of side `s`'s queue to the other side; false when it must wait.
    fn forward_one(&self, st: &mut SpliceSt, s: usize) -> bool {
        let o = 1 - s;
        let Some(&i) = st.link[s].fwd.front() else { return false };
        let Some(h) = st.link[s].meta[i] else {
            st.link[s].fwd.pop_front();
            return true;
        };
        let ring = &self.rings[s];
        let payload = Sge::new(&*ring.lmrs[1], ring.at(i) + HDR as u64, u64::from(h.len));
        let res = match h.kind {
            Kind::Send => {
                if !st.link[o].credits.can_send_data() {
                    return false;
                }
                let mut d = Header::new(Kind::Deliver);
                d.id = h.id;
                d.offset = h.offset;
                d.len = h.len;
                d.total = h.total;
                d.flags = h.flags & (flags::LAST | flags::SOLICITED);
                Self::stamp(st, o, &mut d, true);
                ring.set_header(i, &d);
                let sge = [Sge::new(&*ring.lmrs[1], ring.at(i), HDR as u64 + u64::from(h.len))];
                let r = self.eps[o].post_send(
                    &sge,
                    Cookie(cookie(self.id, K_DELIVER, i)),
                    DtoFlags::empty(),
                );
                if r.is_err() {
                    // Put the credit back: the message did not go.
                    st.link[o].credits.undo(true, (d.ret_data, d.ret_ctl));
                }
                r
            }
            Kind::Write => match h.ctx {
                Some(ctx) => self.eps[o].post_rdma_write(
                    &[payload],
                    ctx.at(h.offset),
                    Cookie(cookie(self.id, K_WRITE, i)),
                    DtoFlags::empty(),
                ),
                None => Err(Error::invalid("write without a target")),
            },
            Kind::ReadReq => match h.ctx {
                Some(ctx) => self.eps[o].post_rdma_read(
                    &[payload],
                    ctx.at(h.offset),
                    Cookie(cookie(self.id, K_READ, i)),
                    DtoFlags::empty(),
                ),
                None => Err(Error::invalid("read without a target")),
            },
            _ => Err(Error::invalid("not forwardable")),
        };
        crate::trace::line(|| {
            format!(
                "splice {} fwd side{s} slot {i} {:?} id {} len {} -> {:?} (side{o} data={} ctl={})",
                self.id,
                h.kind,
                h.id,
                h.len,
                res,
                st.link[o].credits.data(),
                st.link[o].credits.ctl()
            )
        });
        match res {
            Ok(()) => {
                st.link[s].fwd.pop_front();
                st.link[s].out += 1;
                true
            }
            Err(Error::QueueFull) => false,
            Err(e) => {
                st.link[s].fwd.pop_front();
                st.link[s].tracker.chunk_done(h.id, post_status(&e));
                self.repost(st, s, i, true);
                true
            }
        }
    }

    /// The operation at the front of side `s`'s queue when it has fully
    /// arrived — or fills every data buffer of the ring (a message larger
    /// than the ring is forwarded in ring-sized pieces rather than never).
    fn front_op_stored(&self, st: &SpliceSt, s: usize) -> Option<u64> {
        let l = &st.link[s];
        let id = l.meta[*l.fwd.front()?]?.id;
        let whole =
            l.fwd.iter().filter_map(|&i| l.meta[i]).any(|h| h.id == id && h.has(flags::LAST));
        let full = l.fwd.len() + l.credits.owed().0 as usize + 4 >= self.rings[s].n;
        (whole || full).then_some(id)
    }

    fn send_ctl(&self, st: &mut SpliceSt, s: usize, extra: u8) -> bool {
        let Some(slot) = st.link[s].free_ctl.pop() else { return false };
        let mut h = Header::new(Kind::Ctl);
        h.flags = extra;
        Self::stamp(st, s, &mut h, false);
        let (region, lmr) = &self.ctl[s];
        let off = (slot * HDR) as u64;
        let _ = region.write(off, &h.encode());
        let sge = [Sge::new(&**lmr, off, HDR as u64)];
        let r =
            self.eps[s].post_send(&sge, Cookie(cookie(self.id, K_CTL, slot)), DtoFlags::empty());
        crate::trace::line(|| {
            format!(
                "splice {} ctl to side{s} ack {} ret {}/{} -> {r:?}",
                self.id, h.ack, h.ret_data, h.ret_ctl
            )
        });
        if r.is_err() {
            st.link[s].credits.undo(false, (h.ret_data, h.ret_ctl));
            st.link[s].free_ctl.push(slot);
            return false;
        }
        true
    }

    /// Side `1 - s` has ended: what side `s` sent toward it can no longer
    /// land. Each such chunk fails (its initiator hears of it with the next
    /// acknowledgement) and its buffer goes back to side `s`'s ring.
    fn fail_queued(&self, st: &mut SpliceSt, s: usize) {
        while let Some(i) = st.link[s].fwd.pop_front() {
            if let Some(h) = st.link[s].meta[i] {
                crate::trace::line(|| format!("splice {} side{s} fails id {}", self.id, h.id));
                st.link[s].tracker.chunk_done(h.id, Status::Broken);
            }
            self.repost(st, s, i, true);
        }
    }

    /// Moves everything that can move now.
    pub(crate) fn pump(&self, st: &mut SpliceSt) {
        for s in 0..2 {
            let o = 1 - s;
            if st.link[o].ended {
                self.fail_queued(st, s);
                continue;
            }
            if !st.link[o].up {
                // Still being set up: side o's endpoint is not connected yet.
                continue;
            }
            if self.sf {
                // The thesis's forwarder: whole message, handshake, one at a time.
                loop {
                    match st.link[s].sf {
                        Sf::Idle => {
                            let Some(id) = self.front_op_stored(st, s) else {
                                // Storing: the rest of the message needs its buffers back.
                                if st.link[s].credits.owed().0 > 0 {
                                    st.link[s].credits.set_urgent();
                                }
                                break;
                            };
                            if st.link[s].out > 0 || st.link[o].credits.ctl() < 2 {
                                break;
                            }
                            if !self.send_ctl(st, o, flags::ECHO) {
                                break;
                            }
                            st.link[s].sf = Sf::AwaitEcho(id);
                            break;
                        }
                        Sf::AwaitEcho(_) => break,
                        Sf::Go(id) => {
                            let front = st.link[s].fwd.front().and_then(|&i| st.link[s].meta[i]);
                            if front.is_none_or(|h| h.id != id) {
                                st.link[s].sf = Sf::Idle;
                                continue;
                            }
                            if !self.forward_one(st, s) {
                                break;
                            }
                        }
                    }
                }
            } else {
                while self.forward_one(st, s) {}
            }
            // Read data back to side s.
            while let Some(&i) = st.link[s].outq.front().filter(|_| !st.link[s].ended) {
                if !st.link[s].credits.can_send_data() {
                    break;
                }
                let Some(rq) = st.link[s].meta[i] else {
                    st.link[s].outq.pop_front();
                    continue;
                };
                let mut d = Header::new(Kind::ReadData);
                d.id = rq.id;
                d.total = rq.total;
                d.len = rq.len;
                Self::stamp(st, s, &mut d, true);
                let ring = &self.rings[s];
                ring.set_header(i, &d);
                let sge = [Sge::new(&*ring.lmrs[0], ring.at(i), HDR as u64 + u64::from(rq.len))];
                if self.eps[s]
                    .post_send(&sge, Cookie(cookie(self.id, K_READDATA, i)), DtoFlags::empty())
                    .is_err()
                {
                    st.link[s].credits.undo(true, (d.ret_data, d.ret_ctl));
                    break;
                }
                st.link[s].outq.pop_front();
            }
        }
        for s in 0..2 {
            if st.link[s].ended || !st.link[s].up {
                continue;
            }
            if st.link[s].tracker.urgent() {
                st.link[s].credits.set_urgent();
            }
            while st.link[s].credits.want_ctl() {
                if !self.send_ctl(st, s, 0) {
                    break;
                }
            }
        }
    }

    /// When side `s` has ended (orderly or not), closes the other side once
    /// every message that arrived from `s` has landed there: nothing that
    /// made it into the bridge is dropped by a close.
    pub(crate) fn pass_on_close(&self, st: &mut SpliceSt) {
        for s in 0..2 {
            let l = &st.link[s];
            if l.ended && !l.passed_on && l.fwd.is_empty() && l.tracker.idle() {
                st.link[s].passed_on = true;
                crate::trace::line(|| format!("splice {} side{s} close passed on", self.id));
                // The last acknowledgements go out ahead of the close.
                let o = 1 - s;
                if st.link[o].up && !st.link[o].ended && st.link[o].credits.ctl() >= 1 {
                    st.link[o].credits.set_urgent();
                    if st.link[o].credits.want_ctl() {
                        self.send_ctl(st, o, 0);
                    }
                }
                let _ = self.eps[1 - s].disconnect();
            }
        }
    }

    /// True when nothing of this splice is in flight.
    pub(crate) fn idle(st: &SpliceSt) -> bool {
        st.link.iter().all(|l| l.tracker.idle() && l.fwd.is_empty() && l.outq.is_empty())
    }
}
