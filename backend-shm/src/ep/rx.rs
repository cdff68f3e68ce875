//! The receive side: frames from the peer's ring, in order. Requests are
//! checked against this IA's regions (key, PZ, rights, bounds) before a
//! byte lands; a refused one is answered with its status and its payload
//! skipped. A message waits at the head of the ring for a posted receive
//! (up to the IA's `rnr_timeout`), so nothing behind it overtakes it.

use super::shared::*;
use crate::domain::LmrInner;
use crate::wire::{Hdr, IMM, Op, SOLICITED};
use rmr_api::{Access, DtoCompletion, DtoOp, EpState, Event, Status};
use std::sync::Arc;
use std::time::Instant;

/// Frames taken per drive at most (a flood does not starve the caller).
const BATCH: usize = 256;

/// What handling one frame came to.
enum Step {
    /// Taken; go on.
    Next,
    /// The frame must wait (no receive posted yet): stop here.
    Wait,
}

impl EpShared {
    /// Takes what the peer's ring holds; true when anything moved.
    pub(crate) fn take_in(&self, rx: &mut Rx, link: &Link) -> bool {
        let mut moved = false;
        self.rx_blocked.store(false, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..BATCH {
            let (h, payload) = match link.inc.peek() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(why) => {
                    self.flush_ack(rx, link);
                    self.broken(rx, format!("protocol error from the peer: {why}"));
                    return true;
                }
            };
            if self.state() != EpState::Connected {
                // This side left: what still arrives is dropped.
                link.inc.consume(&h);
                moved = true;
                continue;
            }
            match self.frame(rx, link, &h, payload) {
                Ok(Step::Next) => {
                    link.inc.consume(&h);
                    moved = true;
                    if h.op == Op::Disconnect as u8 {
                        break;
                    }
                }
                Ok(Step::Wait) => {
                    self.rx_blocked.store(true, std::sync::atomic::Ordering::SeqCst);
                    break;
                }
                Err(why) => {
                    self.flush_ack(rx, link);
                    self.broken(rx, format!("protocol error from the peer: {why}"));
                    return true;
                }
            }
        }
        let acked = self.flush_ack(rx, link);
        if moved {
            link.inc.publish(None);
            link.wake_producer();
        }
        if acked {
            // The initiator may sleep on this answer (it came as no frame).
            link.wake_consumer();
        }
        moved
    }

    /// Gives the pending "all worked up to here" answer: on the ring's
    /// shared line when no answer frame waits to go (the initiator reads it
    /// before it takes in its ring, so no frame answering an earlier request
    /// can be overtaken), else as a frame behind those. True when it went on
    /// the line.
    pub(crate) fn flush_ack(&self, rx: &mut Rx, link: &Link) -> bool {
        let Some(seq) = rx.ack.take() else { return false };
        let mut tx = self.tx();
        if tx.pending.is_empty() {
            link.inc.publish(Some(seq + 1));
            return true;
        }
        let mut h = Hdr::new(Op::AckUpTo);
        h.seq = seq;
        tx.pending.push_back(OutFrame { h, segs: Segs::new() });
        self.pump(&mut tx, link);
        false
    }

    /// Answers request `seq` with a failure (after the pending acks).
    fn nack(&self, rx: &mut Rx, link: &Link, seq: u64, status: Status) {
        self.flush_ack(rx, link);
        let mut h = Hdr::new(Op::Nack);
        h.seq = seq;
        h.status = status.code();
        self.answer(link, h, Segs::new());
    }

    fn frame(&self, rx: &mut Rx, link: &Link, h: &Hdr, payload: *const u8) -> Result<Step, String> {
        let op = Op::from_u8(h.op).ok_or_else(|| format!("unknown frame op {}", h.op))?;
        let len = u64::from(h.len);
        if op == Op::Disconnect {
            self.flush_ack(rx, link);
            // Everything the peer sent before is taken: what it acknowledged
            // on its line succeeded, before the rest is flushed.
            let acked = link.out.acked().load(std::sync::atomic::Ordering::SeqCst);
            self.apply_acked(link, acked, link.inc.consumed());
            self.remote_disconnect(rx);
            return Ok(Step::Next);
        }
        if rx.cur.is_some() {
            if op != Op::Cont {
                return Err(format!("{op:?} inside another request's payload"));
            }
            return self.more(rx, link, len, payload);
        }
        if matches!(op, Op::Send | Op::Write | Op::ReadReq) && h.total > self.ia.attr.max_msg_size {
            return Err(format!(
                "a request of {} bytes (at most {})",
                h.total, self.ia.attr.max_msg_size
            ));
        }
        if matches!(op, Op::ReadReq | Op::FetchAdd | Op::CmpSwap)
            && self.tx().pending.len() > 2 * self.ia.cfg.max_dtos
        {
            return Err("the peer asks for answers and takes none".into());
        }
        match op {
            Op::Cont => Err("payload with no request".into()),
            Op::Send => self.on_send(rx, link, h, payload),
            Op::Write => self.on_write(rx, link, h, payload),
            Op::ReadReq => {
                if len != 0 {
                    return Err("a read request with payload".into());
                }
                self.flush_ack(rx, link);
                let mut a = Hdr::new(Op::ReadResp);
                a.seq = h.seq;
                let segs = match self.target(h.key, Access::REMOTE_READ, h.addr, h.total) {
                    Ok(seg) => {
                        a.total = h.total;
                        std::iter::once(seg).collect()
                    }
                    Err(s) => {
                        a.status = s.code();
                        Segs::new()
                    }
                };
                self.answer_read(link, a, segs);
                Ok(Step::Next)
            }
            Op::FetchAdd | Op::CmpSwap => {
                self.flush_ack(rx, link);
                let mut a = Hdr::new(Op::AtomicResp);
                a.seq = h.seq;
                match self.atomic(op, h) {
                    Ok(old) => a.arg = old,
                    Err(s) => a.status = s.code(),
                }
                self.answer(link, a, Segs::new());
                Ok(Step::Next)
            }
            Op::AckUpTo | Op::Nack => {
                let status = Status::from_code(h.status).ok_or("bad status code")?;
                self.answered(op, h.seq, status);
                Ok(Step::Next)
            }
            Op::AtomicResp => {
                let status = Status::from_code(h.status).ok_or("bad status code")?;
                self.atomic_answered(h.seq, status, h.arg);
                Ok(Step::Next)
            }
            Op::ReadResp => {
                let status = Status::from_code(h.status).ok_or("bad status code")?;
                if !status.is_ok() {
                    self.answered(Op::Nack, h.seq, status);
                    return Ok(Step::Next);
                }
                let segs = self.local_of(h.seq).ok_or("an answer to no read")?;
                let want: u64 = segs.iter().map(|s| s.len).sum();
                if h.total != want {
                    return Err(format!("read answer of {} bytes for {want}", h.total));
                }
                rx.cur = Some(Cur::ReadResp { segs, seq: h.seq, total: h.total, got: 0 });
                self.more(rx, link, len, payload)
            }
            Op::Pad | Op::Disconnect => Ok(Step::Next),
        }
    }

    /// The checked target of a ring request in this IA's memory.
    fn target(&self, key: u64, need: Access, addr: u64, len: u64) -> Result<Seg, Status> {
        self.target_lmr(key, need, addr, len).map(|(s, _)| s)
    }

    /// [`EpShared::target`], with the LMR it lies in (a write that spans
    /// frames looks again at its registration before each).
    fn target_lmr(
        &self,
        key: u64,
        need: Access,
        addr: u64,
        len: u64,
    ) -> Result<(Seg, Arc<LmrInner>), Status> {
        let l = self.ia.lookup(key).ok_or(Status::BadKey)?;
        let off = l.check_remote(self.pz_id, need, addr, len)?;
        Ok((Seg { region: l.region.clone(), off, len }, l))
    }

    fn atomic(&self, op: Op, h: &Hdr) -> Result<u64, Status> {
        if h.addr % 8 != 0 {
            return Err(Status::OutOfBounds);
        }
        let seg = self.target(h.key, Access::REMOTE_ATOMIC, h.addr, 8)?;
        let w = seg.region.atomic_u64(seg.off).map_err(|_| Status::OutOfBounds)?;
        Ok(match op {
            Op::FetchAdd => w.fetch_add(h.arg, std::sync::atomic::Ordering::SeqCst),
            _ => match w.compare_exchange(
                h.arg,
                h.arg2,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            ) {
                Ok(v) | Err(v) => v,
            },
        })
    }

    /// The head frame needs a receive: takes one, or says to wait (until the
    /// receiver-not-ready timeout, which fails the request instead).
    fn take_recv(&self, rx: &mut Rx, link: &Link, h: &Hdr) -> Result<Option<Recv>, Step> {
        if let Some(r) = rx.recvs.pop_front() {
            rx.rnr_since = None;
            return Ok(Some(r));
        }
        let since = *rx.rnr_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.ia.cfg.rnr_timeout {
            return Err(Step::Wait);
        }
        rx.rnr_since = None;
        self.nack(rx, link, h.seq, Status::ReceiverNotReady);
        Ok(None)
    }

    fn on_send(
        &self,
        rx: &mut Rx,
        link: &Link,
        h: &Hdr,
        payload: *const u8,
    ) -> Result<Step, String> {
        let recv = match self.take_recv(rx, link, h) {
            Ok(Some(r)) => r,
            Ok(None) => return self.skip(rx, h, payload),
            Err(step) => return Ok(step),
        };
        if h.total > recv.cap {
            let c = self.recv_done(&recv, DtoOp::Recv, Status::RecvTooSmall, 0);
            self.push_recv(Event::Dto(c));
            self.nack(rx, link, h.seq, Status::RecvTooSmall);
            return self.skip(rx, h, payload);
        }
        let solicited = h.flags & SOLICITED != 0;
        rx.cur = Some(Cur::Recv { recv, seq: h.seq, total: h.total, got: 0, solicited });
        self.more(rx, link, u64::from(h.len), payload)
    }

    fn on_write(
        &self,
        rx: &mut Rx,
        link: &Link,
        h: &Hdr,
        payload: *const u8,
    ) -> Result<Step, String> {
        let (seg, lmr) = match self.target_lmr(h.key, Access::REMOTE_WRITE, h.addr, h.total) {
            Ok(s) => s,
            Err(s) => {
                self.nack(rx, link, h.seq, s);
                return self.skip(rx, h, payload);
            }
        };
        let imm = if h.flags & IMM != 0 {
            match self.take_recv(rx, link, h) {
                Ok(Some(r)) => Some((h.arg, r)),
                Ok(None) => return self.skip(rx, h, payload),
                Err(step) => return Ok(step),
            }
        } else {
            None
        };
        rx.cur = Some(Cur::Write { seg, lmr, seq: h.seq, total: h.total, got: 0, imm });
        self.more(rx, link, u64::from(h.len), payload)
    }

    /// Skips a refused request's payload (this frame's and its `Cont`s').
    fn skip(&self, rx: &mut Rx, h: &Hdr, _payload: *const u8) -> Result<Step, String> {
        let len = u64::from(h.len);
        if len > h.total {
            return Err("a frame longer than its request".into());
        }
        if h.total > len {
            rx.cur = Some(Cur::Discard { left: h.total - len });
        }
        Ok(Step::Next)
    }

    /// `len` payload bytes at `payload` for the current request.
    fn more(&self, rx: &mut Rx, link: &Link, len: u64, payload: *const u8) -> Result<Step, String> {
        let Some(cur) = rx.cur.as_mut() else { return Err("payload with no request".into()) };
        let (got, total) = match cur {
            Cur::Recv { got, total, .. }
            | Cur::Write { got, total, .. }
            | Cur::ReadResp { got, total, .. } => (got, *total),
            Cur::Discard { left } => {
                if len > *left {
                    return Err("more payload than the request said".into());
                }
                *left -= len;
                if *left == 0 {
                    rx.cur = None;
                }
                return Ok(Step::Next);
            }
        };
        if *got + len > total {
            return Err("more payload than the request said".into());
        }
        let at = *got;
        *got += len;
        let finished = *got == total;
        if let Cur::Write { lmr, seq, .. } = &*cur
            && !lmr.registered.load(std::sync::atomic::Ordering::Acquire)
        {
            // Deregistered since the write began: nothing more lands (a
            // deregistration waits for a frame being placed, see
            // `Peer::quiesce`); the rest is skipped, the request refused.
            let (seq, left) = (*seq, total - at - len);
            let was = std::mem::replace(&mut rx.cur, (left > 0).then_some(Cur::Discard { left }));
            if let Some(Cur::Write { imm: Some((_, recv)), .. }) = was {
                // The receive its immediate took completes, refused too.
                let c = self.recv_done(&recv, DtoOp::RecvWriteImm, Status::RemoteAccess, 0);
                self.push_recv(Event::Dto(c));
            }
            self.nack(rx, link, seq, Status::RemoteAccess);
            return Ok(Step::Next);
        }
        // SAFETY: `payload` is this frame's payload of `len` bytes (the ring
        // checked that the frame lies inside it), which the consumer owns
        // until it moves the ring's tail.
        unsafe {
            match &*cur {
                Cur::Recv { recv, .. } => scatter(&recv.segs, at, payload, len as usize),
                Cur::Write { seg, .. } => write_in(seg, at, payload, len as usize),
                Cur::ReadResp { segs, .. } => scatter(segs, at, payload, len as usize),
                Cur::Discard { .. } => {}
            }
        }
        if !finished {
            return Ok(Step::Next);
        }
        match rx.cur.take().expect("current") {
            Cur::Recv { recv, seq, total, solicited, .. } => {
                let mut c = self.recv_done(&recv, DtoOp::Recv, Status::Success, total);
                c.solicited = solicited;
                self.push_recv(Event::Dto(c));
                rx.ack = Some(seq);
            }
            Cur::Write { seq, total, imm, .. } => {
                if let Some((v, recv)) = imm {
                    let mut c: DtoCompletion =
                        self.recv_done(&recv, DtoOp::RecvWriteImm, Status::Success, total);
                    c.imm = Some(v);
                    self.push_recv(Event::Dto(c));
                }
                rx.ack = Some(seq);
            }
            Cur::ReadResp { seq, .. } => {
                self.answered(Op::Nack, seq, Status::Success);
            }
            Cur::Discard { .. } => {}
        }
        Ok(Step::Next)
    }
}
