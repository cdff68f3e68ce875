//! The send side: requests into frames (or straight into the peer's memory
//! by cross-memory attach), frames into the ring as room allows, and the
//! answers that complete requests in posting order.

use super::shared::*;
use crate::sys::{Dir, Piece, cross};
use crate::wire::{Hdr, IMM, Op, SOLICITED};
use rmr_api::{
    Access, DtoCompletion, DtoFlags, DtoOp, EpState, Error, Event, RemoteAddr, Result, Sge, Status,
};
use std::sync::atomic::Ordering;

/// What a request is, for [`EpShared::post`].
pub(crate) struct Req<'a> {
    pub(crate) op: DtoOp,
    pub(crate) local: &'a [Sge<'a>],
    pub(crate) remote: Option<RemoteAddr<'a>>,
    pub(crate) cookie: rmr_api::Cookie,
    pub(crate) flags: DtoFlags,
    pub(crate) imm: Option<u32>,
    /// Addend, or compare and swap.
    pub(crate) args: (u64, u64),
}

impl EpShared {
    pub(crate) fn link(&self) -> Result<&Link> {
        match (self.state(), self.link.get()) {
            (EpState::Connected, Some(l)) => Ok(l),
            _ => Err(Error::NotConnected),
        }
    }

    /// Posts a request of the send side.
    pub(crate) fn post(&self, r: Req<'_>) -> Result<()> {
        let link = self.link()?;
        let atomic = matches!(r.op, DtoOp::FetchAdd | DtoOp::CmpSwap);
        let need = match r.op {
            DtoOp::RdmaRead => Access::LOCAL_WRITE,
            _ if atomic => Access::LOCAL_WRITE,
            _ => Access::empty(),
        };
        let (total, places) = checked_places(r.local, self.pz_id, need, self.ia.attr.max_sges)?;
        if total > self.ia.attr.max_msg_size {
            return Err(Error::invalid(format!(
                "{total} bytes, at most {}",
                self.ia.attr.max_msg_size
            )));
        }
        if atomic && total != 8 {
            return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
        }
        let (key, addr) = match &r.remote {
            Some(ra) => {
                let len = if atomic { 8 } else { total };
                match ra.offset.checked_add(len) {
                    Some(end) if end <= ra.ctx.len => {}
                    _ => {
                        return Err(Error::OutOfBounds {
                            offset: ra.offset,
                            len,
                            limit: ra.ctx.len,
                        });
                    }
                }
                let addr = ra.ctx.addr.checked_add(ra.offset).ok_or(Error::OutOfBounds {
                    offset: ra.offset,
                    len: total,
                    limit: ra.ctx.len,
                })?;
                (ra.ctx.key(), addr)
            }
            None => (0, 0),
        };
        let mut tx = self.tx();
        if tx.outstanding.len() >= self.ia.cfg.max_dtos {
            drop(tx);
            // Answers may be waiting in the ring: take them, then look again.
            self.drive_self();
            tx = self.tx();
            if tx.outstanding.len() >= self.ia.cfg.max_dtos {
                return Err(Error::QueueFull);
            }
        }
        // The connection may have ended since the first look: a request
        // queued after the teardown's flush would never complete.
        if self.state() != EpState::Connected {
            return Err(Error::NotConnected);
        }
        // Straight into the peer's memory: a large access by cross-memory
        // attach, one of any size to a shared region by a mapped copy.
        let cma = self.ia.cfg.cma
            && link.cma.is_ok()
            && matches!(r.op, DtoOp::RdmaWrite | DtoOp::RdmaRead)
            && r.imm.is_none()
            && tx.unapplied == 0
            && (total >= self.ia.cfg.cma_min as u64
                || self.ia.cfg.map
                    && link.peer_table.lookup(key).is_some_and(|e| e.file.is_some()));
        let mut out = Out {
            cookie: r.cookie,
            op: r.op,
            flags: r.flags,
            bytes: total,
            seq: None,
            memop: !matches!(r.op, DtoOp::Send),
            local: Segs::new(),
            done: None,
            old: None,
        };
        if cma {
            let status = self.cross(link, &mut tx.files, r.op, &places, key, addr, total);
            if r.op == DtoOp::RdmaWrite && status.is_ok() {
                // The bytes are in the peer's memory with no frame behind
                // them: a peer asleep on its doorbell (a `progress_until`
                // waiting for them) looks again. The fence orders the copy
                // before the look at its flag (which it raised before its
                // last look at its condition).
                std::sync::atomic::fence(Ordering::SeqCst);
                link.wake_consumer();
            }
            if tx.outstanding.is_empty() {
                // Nothing before it to complete first: done now (what
                // `complete_front` would do with it alone).
                drop(tx);
                if !status.is_ok() || !r.flags.contains(DtoFlags::SUPPRESS) {
                    let bytes = if status.is_ok() { total } else { 0 };
                    let c = DtoCompletion::new(self.id, r.cookie, r.op, status, bytes);
                    self.push_request(Event::Dto(c));
                }
                return Ok(());
            }
            out.done = Some(status);
            tx.outstanding.push_back(out);
            let evs = self.complete_front(&mut tx);
            drop(tx);
            self.publish(evs);
            return Ok(());
        }
        let seq = tx.next_seq;
        tx.next_seq += 1;
        out.seq = Some(seq);
        let mut h = Hdr::new(Op::Send);
        h.seq = seq;
        h.key = key;
        h.addr = addr;
        h.total = total;
        let carries = match r.op {
            DtoOp::Send => {
                if r.flags.contains(DtoFlags::SOLICITED) {
                    h.flags |= SOLICITED;
                }
                true
            }
            DtoOp::RdmaWrite => {
                h.op = Op::Write as u8;
                if let Some(imm) = r.imm {
                    h.flags |= IMM;
                    h.arg = u64::from(imm);
                }
                true
            }
            DtoOp::RdmaRead => {
                h.op = Op::ReadReq as u8;
                out.local = segs_from(&places);
                false
            }
            _ => {
                h.op = if r.op == DtoOp::FetchAdd { Op::FetchAdd } else { Op::CmpSwap } as u8;
                (h.arg, h.arg2) = r.args;
                h.total = 0;
                out.local = segs_from(&places);
                false
            }
        };
        if out.memop {
            tx.unapplied += 1;
        }
        tx.outstanding.push_back(out);
        if carries && tx.pending.is_empty() && total <= link.out.max_chunk() as u64 {
            // Nothing queued ahead and one frame's worth: straight into
            // the ring from the caller's segments, if it has room.
            h.len = total as u32;
            let local = places.iter().map(piece_at);
            // SAFETY: the ring hands `fill` the payload space of the frame
            // it reserves (`total` bytes, this side's until it publishes);
            // the pieces are the caller's segments, each checked against
            // its region (`checked_places`) and kept by the caller's borrows.
            let mut fill = |dst: *mut u8| unsafe {
                copy_runs(local.clone(), Dir::Write, false, 0, dst, total as usize)
            };
            if link.out.push(&h, &mut fill) {
                link.wake_consumer();
                return Ok(());
            }
        }
        let payload = if carries { segs_from(&places) } else { Segs::new() };
        tx.pending.push_back(OutFrame { h, segs: payload });
        self.pump(&mut tx, link);
        Ok(())
    }

    /// A write or read straight into the peer's memory, after the checks
    /// the target would make, against the table it publishes: a copy
    /// through a mapping where the region lies in a shared file, else
    /// cross-memory attach.
    #[allow(clippy::too_many_arguments)]
    fn cross(
        &self,
        link: &Link,
        files: &mut crate::sys::Files,
        op: DtoOp,
        local: &[Place<'_>],
        key: u64,
        addr: u64,
        total: u64,
    ) -> Status {
        // In flight from the lookup to the end of the system call: the
        // target's deregistration waits for it (see `domain::Peer`).
        struct InFlight<'a>(&'a std::sync::atomic::AtomicU64);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        link.out.cma_busy().fetch_add(1, Ordering::SeqCst);
        let _busy = InFlight(link.out.cma_busy());
        let Some(e) = link.peer_table.lookup(key) else { return Status::BadKey };
        let need = if op == DtoOp::RdmaRead { Access::REMOTE_READ } else { Access::REMOTE_WRITE };
        if let Err(s) = e.check(link.peer_pz, need, addr, total) {
            return s;
        }
        let dir = if op == DtoOp::RdmaRead { Dir::Read } else { Dir::Write };
        if let Some(f) = e.file.filter(|_| self.ia.cfg.map) {
            match files.get(f) {
                Ok(m) => {
                    // The entry's bytes must lie inside the file (a peer's
                    // table could say otherwise).
                    let at = f.off.checked_add(addr - e.addr);
                    match at
                        .filter(|a| a.checked_add(total).is_some_and(|end| end <= m.len() as u64))
                    {
                        Some(at) => {
                            let p = m.ptr().wrapping_add(at as usize);
                            // SAFETY: `[at, at + total)` lies inside the
                            // mapping (checked against its length just
                            // above), which `m` keeps mapped for the copy;
                            // the pieces are the caller's segments, each
                            // checked against its region (`checked_places`),
                            // `total` bytes in all; the peer's bytes move
                            // as its region's accessors move them.
                            unsafe {
                                copy_runs(
                                    local.iter().map(piece_at),
                                    dir,
                                    true,
                                    0,
                                    p,
                                    total as usize,
                                )
                            };
                            return Status::Success;
                        }
                        None => return Status::RemoteAccess,
                    }
                }
                Err(why) if total < self.ia.cfg.cma_min as u64 => {
                    tracing::debug!(target: "rmr::shm", ep = self.id.0, why = %why, "a shared region's access by cross-memory attach");
                }
                Err(_) => {}
            }
        }
        let pieces: smallvec::SmallVec<[Piece; 4]> =
            rmr_api::provider::small_vec(local.iter().map(piece_at));
        match cross(link.peer_pid, dir, &pieces, addr, total as usize) {
            Ok(()) => Status::Success,
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Status::RemoteAccess,
            Err(e) => {
                tracing::warn!(target: "rmr::shm", ep = self.id.0, error = %e, "cross-memory access failed");
                Status::Broken
            }
        }
    }

    /// Moves pending frames into the ring while it has room; true when any went.
    pub(crate) fn pump(&self, tx: &mut Tx, link: &Link) -> bool {
        let mut moved = false;
        let max = link.out.max_chunk() as u64;
        while let Some(f) = tx.pending.front() {
            let payload = matches!(Op::from_u8(f.h.op), Some(Op::Send | Op::Write | Op::ReadResp));
            let total = if payload { f.h.total } else { 0 };
            let at = tx.sent;
            let chunk = (total - at).min(max);
            let mut h = if at == 0 {
                f.h
            } else {
                let mut c = Hdr::new(Op::Cont);
                c.seq = f.h.seq;
                c
            };
            h.len = chunk as u32;
            let segs = &f.segs;
            // A read's answer comes from memory a peer reads and this
            // process may write meanwhile: copied as the region's accessors
            // do. Everything else is the payload of a DTO this side posted.
            let answer = f.h.op == Op::ReadResp as u8;
            // SAFETY: the ring hands `fill` the payload space of the frame
            // it reserves, `chunk` bytes this side owns until it publishes.
            let mut fill = |dst: *mut u8| unsafe {
                if answer {
                    read_out(segs, at, dst, chunk as usize)
                } else {
                    gather(segs, at, dst, chunk as usize)
                }
            };
            if !link.out.push(&h, &mut fill) {
                // Full: ask the consumer to ring when it frees room, then
                // look once more (it may have freed room meanwhile).
                link.out.want_space().store(1, Ordering::SeqCst);
                self.efd_armed.store(true, Ordering::SeqCst);
                if !link.out.push(&h, &mut fill) {
                    break;
                }
            }
            moved = true;
            tx.sent += chunk;
            if tx.sent == total {
                tx.sent = 0;
                tx.pending.pop_front();
            }
        }
        if moved {
            link.wake_consumer();
        }
        moved
    }

    /// Queues a frame of this side's own (an answer) and pumps.
    pub(crate) fn answer(&self, link: &Link, h: Hdr, segs: Segs) {
        let mut tx = self.tx();
        tx.pending.push_back(OutFrame { h, segs });
        self.pump(&mut tx, link);
    }

    /// Completes the requests at the front that are done, in order; returns
    /// their events (published once the lock is released).
    pub(crate) fn complete_front(&self, tx: &mut Tx) -> Vec<Event> {
        let mut evs = Vec::new();
        while tx.outstanding.front().is_some_and(|o| o.done.is_some()) {
            let o = tx.outstanding.pop_front().expect("a front");
            let status = o.done.expect("done");
            if o.memop && o.seq.is_some() {
                tx.unapplied -= 1;
            }
            if !status.is_ok() || !o.flags.contains(DtoFlags::SUPPRESS) {
                let bytes = if status.is_ok() { o.bytes } else { 0 };
                let mut c = DtoCompletion::new(self.id, o.cookie, o.op, status, bytes);
                c.imm = o.old;
                evs.push(Event::Dto(c));
            }
        }
        evs
    }

    pub(crate) fn publish(&self, evs: Vec<Event>) {
        for e in evs {
            self.push_request(e);
        }
    }

    /// The answer to ring request `seq` (`AckUpTo`: every one up to it).
    pub(crate) fn answered(&self, op: Op, seq: u64, status: Status) {
        let mut tx = self.tx();
        for o in tx.outstanding.iter_mut() {
            let Some(s) = o.seq else { continue };
            if s > seq {
                break;
            }
            if op == Op::AckUpTo {
                if o.done.is_none() {
                    o.done = Some(Status::Success);
                }
            } else if s == seq {
                o.done = Some(status);
                break;
            }
        }
        let evs = self.complete_front(&mut tx);
        drop(tx);
        self.publish(evs);
    }

    /// Queues the answer to a read. When the ring cannot take all of it now,
    /// what is left is copied aside at once: a write the peer posted after
    /// the read must not change what the read returns.
    pub(crate) fn answer_read(&self, link: &Link, h: Hdr, segs: Segs) {
        let mut tx = self.tx();
        tx.pending.push_back(OutFrame { h, segs });
        self.pump(&mut tx, link);
        if let Some(f) = tx.pending.back_mut() {
            if f.h.op == Op::ReadResp as u8 && f.h.seq == h.seq && f.h.total > 0 {
                let copy = rmr_api::MemRegion::new(f.h.total as usize);
                let mut at = 0;
                for s in &f.segs {
                    let _ = copy.copy_from(at, &s.region, s.off, s.len);
                    at += s.len;
                }
                f.segs = std::iter::once(Seg { region: copy, off: 0, len: f.h.total }).collect();
            }
        }
    }

    /// An atomic's answer: its old value, or its failure.
    pub(crate) fn atomic_answered(&self, seq: u64, status: Status, old: u64) {
        let mut tx = self.tx();
        if let Some(o) = tx.outstanding.iter_mut().find(|o| o.seq == Some(seq)) {
            if status.is_ok() {
                let v = old.to_le_bytes();
                // SAFETY: `v` is a local array of 8 bytes.
                unsafe { scatter(&o.local, 0, v.as_ptr(), 8) };
                o.old = Some(old);
            }
            o.done = Some(status);
        }
        let evs = self.complete_front(&mut tx);
        drop(tx);
        self.publish(evs);
    }

    /// The local segments of request `seq` (a read's or an atomic's).
    pub(crate) fn local_of(&self, seq: u64) -> Option<Segs> {
        self.tx().outstanding.iter().find(|o| o.seq == Some(seq)).map(|o| o.local.clone())
    }

    /// Every request not answered yet ends with `status`; frames not yet in
    /// the ring are dropped.
    pub(crate) fn flush_requests(&self, status: Status) {
        let mut tx = self.tx();
        // The peer's files are not written any more: unmapped now, not when
        // the EP is dropped.
        tx.files = crate::sys::Files::default();
        tx.pending.clear();
        tx.sent = 0;
        for o in tx.outstanding.iter_mut() {
            if o.done.is_none() {
                o.done = Some(status);
            }
        }
        let evs = self.complete_front(&mut tx);
        drop(tx);
        self.publish(evs);
    }
}
