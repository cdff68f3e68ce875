//! The reader's work on the endpoint: what each arriving frame does
//! (a send matched to a posted receive, an RDMA write or read served after
//! the key, rights and bounds checks, a response completing an in-flight
//! DTO, an acknowledgement retiring the window), driven by whoever drives
//! the endpoint. The frame parser it runs is [`rx`](super::rx).

use crate::ep::rx::*;
use crate::ep::shared::{EpShared, Inflight};
use crate::tx::{Seg, Segs};
use crate::wire::{self, F_ACK_NOW, F_ACK_REQ, F_SOLICITED, Header, MAX_PAYLOAD, Op};
use rmr_api::Cookie;
use rmr_api::{Access, DtoCompletion, DtoOp, EpState, Event, Status};
use smallvec::SmallVec;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a response waits for the kernel's notices of the zero-copy
/// requests before it ([`EpShared::settle_zerocopy`]).
const ZEROCOPY_SETTLE: Duration = Duration::from_secs(5);
/// How long an orderly disconnect waits for those notices before the
/// requests still waiting for them flush.
const DISCONNECT_SETTLE: Duration = Duration::from_millis(100);

impl EpShared {
    /// Handles every frame the socket has ready. Returns whether anything
    /// moved; `Err` ends the connection.
    pub(crate) fn read_ready(&self, rx: &mut RxState, sock: &TcpStream) -> Result<bool, End> {
        rx.short = false;
        let mut moved = false;
        let r = loop {
            match self.step(rx, sock) {
                Ok(Step::More) => {
                    moved = true;
                    // A frame boundary with no further frame buffered: the
                    // acknowledgement asked for goes out now (delayed a little,
                    // so that more frames or a reply can carry it), not only
                    // when the stream pauses — a long stream would otherwise
                    // complete nothing until its end.
                    if rx.ack_wanted && matches!(rx.phase, Phase::Header) && !rx.header_buffered() {
                        if let Err(e) = self.ack_requested(rx) {
                            break Err(e);
                        }
                    }
                }
                Ok(Step::Blocked) | Ok(Step::Stalled) => break Ok(()),
                // Our disconnect was answered by the peer closing its side.
                Err(End::Broken(why))
                    if why == PEER_CLOSED && self.local_disconnect.load(Ordering::Acquire) =>
                {
                    break Err(End::Orderly);
                }
                Err(e) => break Err(e),
            }
        };
        r?;
        // Nothing more to read now, between frames: acknowledge what was asked
        // for; the acks of a burst are coalesced into one, and a reply posted
        // within the ack delay carries it instead.
        if matches!(rx.phase, Phase::Header) && rx.ack_wanted {
            self.ack_requested(rx)?;
        }
        Ok(moved)
    }

    /// The peer asked for an acknowledgement of what was handled so far.
    fn ack_requested(&self, rx: &mut RxState) -> Result<(), End> {
        rx.ack_wanted = false;
        let now = std::mem::take(&mut rx.ack_now);
        if now || self.ia.cfg.ack_delay.is_zero() {
            let mut w = true;
            self.send_ack_if_wanted(&mut w).map_err(|e| io_end("send ack", e))
        } else {
            // Delayed: a reply posted meanwhile carries the ack for free; a
            // due one goes out even in the middle of a long stream.
            self.arm_ack(self.ia.cfg.ack_delay);
            self.ack_timer();
            Ok(())
        }
    }

    pub(crate) fn send_ack_if_wanted(&self, wanted: &mut bool) -> io::Result<()> {
        if *wanted && self.rx_done.load(Ordering::Acquire) > self.acked_sent.load(Ordering::Acquire)
        {
            self.respond(Header::new(Op::Ack), Segs::new(), None)?;
        }
        *wanted = false;
        Ok(())
    }

    fn step(&self, rx: &mut RxState, sock: &TcpStream) -> Result<Step, End> {
        match std::mem::replace(&mut rx.phase, Phase::Header) {
            Phase::Header => {
                // A peer that sends requests but does not read their
                // responses: take no more until the queue drains (TCP
                // back-pressure) instead of queueing without bound.
                if self.tx_backlogged() {
                    return Ok(Step::Stalled);
                }
                let got = wire::decode_data(&rx.buf[rx.start..rx.end], rx.expect, &mut rx.last_ack);
                match got.map_err(|e| End::Broken(format!("protocol error: {e}")))? {
                    None => Ok(if rx.fill(sock)? { Step::More } else { Step::Blocked }),
                    Some((h, n)) => {
                        rx.start += n;
                        self.on_header(rx, h)
                    }
                }
            }
            Phase::NeedRecv { h, since } => self.on_need_recv(rx, h, since),
            Phase::Place { h, segs, mut idx, mut at, mut left, then } => {
                // On every way out but completion the phase goes back into
                // `rx` (with what it owes: an error ends the stream, and the
                // end completes the receive or read being placed).
                while left > 0 {
                    let got: Result<Option<u64>, End> = {
                        let s = &segs[idx];
                        let n = left.min(s.len - at);
                        if rx.avail() > 0 {
                            let k = n.min(rx.avail() as u64);
                            let src = &rx.buf[rx.start..rx.start + k as usize];
                            match s.region.write(s.off + at, src) {
                                Ok(()) => {
                                    rx.start += k as usize;
                                    Ok(Some(k))
                                }
                                Err(e) => Err(End::Broken(e.to_string())),
                            }
                        } else if n >= DIRECT {
                            match rmr_api::provider::io::recv_into(
                                &s.region,
                                s.off + at,
                                n,
                                sock.as_fd(),
                                libc::MSG_DONTWAIT,
                            ) {
                                Ok(Ok(0)) => {
                                    Err(End::Broken("stream ended inside a payload".into()))
                                }
                                Ok(Ok(k)) => {
                                    rx.rx_bytes += k as u64;
                                    Ok(Some(k as u64))
                                }
                                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => Ok(Some(0)),
                                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                                Ok(Err(e)) => Err(io_end("receive payload", e)),
                                Err(e) => Err(End::Broken(e.to_string())),
                            }
                        } else {
                            match rx.fill(sock) {
                                Ok(true) => Ok(Some(0)),
                                Ok(false) => Ok(None),
                                Err(e) => Err(e),
                            }
                        }
                    };
                    let got = match got {
                        Ok(Some(k)) => k,
                        Ok(None) => {
                            rx.phase = Phase::Place { h, segs, idx, at, left, then };
                            return Ok(Step::Blocked);
                        }
                        Err(e) => {
                            rx.phase = Phase::Place { h, segs, idx, at, left, then };
                            return Err(e);
                        }
                    };
                    at += got;
                    left -= got;
                    if at == segs[idx].len {
                        idx += 1;
                        at = 0;
                    }
                }
                self.then(rx, h, then)
            }
            Phase::Drain { h, mut left, then } => {
                while left > 0 {
                    if rx.avail() == 0 {
                        match rx.fill(sock) {
                            Ok(true) => {}
                            Ok(false) => {
                                rx.phase = Phase::Drain { h, left, then };
                                return Ok(Step::Blocked);
                            }
                            Err(e) => {
                                rx.phase = Phase::Drain { h, left, then };
                                return Err(e);
                            }
                        }
                    }
                    let k = left.min(rx.avail() as u64);
                    rx.start += k as usize;
                    left -= k;
                }
                self.then(rx, h, then)
            }
        }
    }

    /// A frame is fully handled.
    fn done_frame(&self, h: &Header, op: Op) {
        if op.is_request() {
            self.rx_done.store(h.seq, Ordering::Release);
        }
        self.complete_upto(h.ack);
    }

    fn then(&self, rx: &mut RxState, h: Header, then: Then) -> Result<Step, End> {
        let op = match h.validate() {
            Ok(op) => op,
            Err(e) => {
                // Keep what this step owes for the end to complete.
                rx.phase = Phase::Drain { h, left: 0, then };
                return Err(End::Broken(format!("protocol error: {e}")));
            }
        };
        match then {
            Then::Request => {}
            Then::NeedRecv => {
                rx.phase = Phase::NeedRecv { h, since: None };
                return Ok(Step::More);
            }
            Then::Recv(c) => self.complete(c),
            Then::TooSmall(mut c) => {
                c.status = Status::RecvTooSmall;
                self.complete(c);
                self.nak(&h, Status::RecvTooSmall)?;
            }
            Then::Nak(status) => self.nak(&h, status)?,
            Then::ReadResp(c) => {
                if let Some(c) = c {
                    self.complete(c);
                }
            }
        }
        self.done_frame(&h, op);
        Ok(Step::More)
    }

    fn on_header(&self, rx: &mut RxState, h: Header) -> Result<Step, End> {
        let op = h.validate().map_err(|e| End::Broken(format!("protocol error: {e}")))?;
        self.frames[1].fetch_add(1, Ordering::Relaxed);
        self.acked_rcvd.fetch_max(h.ack, Ordering::Relaxed);
        if op.is_request() {
            if h.seq != rx.expect {
                return Err(End::Broken(format!(
                    "protocol error: sequence {} expected {}",
                    h.seq, rx.expect
                )));
            }
            rx.expect += 1;
            if h.flags & F_ACK_REQ != 0 {
                rx.ack_wanted = true;
            }
            if h.flags & F_ACK_NOW != 0 {
                rx.ack_now = true;
            }
        }
        match op {
            // Matched to a receive now (the common case: one is posted), not
            // through a waiting phase first.
            Op::Send => return self.on_need_recv(rx, h, None),
            Op::Write | Op::WriteImm => {
                let len = u64::from(h.len);
                let checked = match self.ia.keys.lookup(h.key) {
                    None => Err(Status::BadKey),
                    Some(l) => l
                        .check_remote(self.pz_id, Access::REMOTE_WRITE, h.addr, len)
                        .map(|off| (l, off)),
                };
                rx.phase = match checked {
                    Err(status) => Phase::Drain { h, left: len, then: Then::Nak(status) },
                    // The whole payload is buffered (every small write):
                    // placed at once, with no placing phase to go through.
                    Ok((l, off)) if op == Op::Write && rx.avail() as u64 >= len => {
                        let src = &rx.buf[rx.start..rx.start + len as usize];
                        l.region.write(off, src).map_err(|e| End::Broken(e.to_string()))?;
                        rx.start += len as usize;
                        self.done_frame(&h, op);
                        return Ok(Step::More);
                    }
                    Ok((l, off)) => {
                        let then = if op == Op::WriteImm { Then::NeedRecv } else { Then::Request };
                        let mut segs = Segs::new();
                        segs.push(Seg { region: l.region.clone(), off, len });
                        Phase::Place { h, segs, idx: 0, at: 0, left: len, then }
                    }
                };
                return Ok(Step::More);
            }
            Op::ReadResp => {
                let f = self.answered(h.seq)?;
                if f.op != DtoOp::RdmaRead || u64::from(h.len) != f.bytes {
                    self.unanswered(f);
                    return Err(End::Broken("protocol error: read response does not match".into()));
                }
                let c = f.signalled.then(|| self.dto(f.cookie, f.op, Status::Success, f.bytes));
                rx.phase = Phase::Place {
                    h,
                    segs: f.dest,
                    idx: 0,
                    at: 0,
                    left: f.bytes,
                    then: Then::ReadResp(c),
                };
                return Ok(Step::More);
            }
            Op::ReadReq => self.on_read_req(&h)?,
            Op::FetchAdd | Op::CmpSwap => self.on_atomic(&h, op)?,
            Op::AtomicResp | Op::Nak => self.on_response(&h, op)?,
            Op::Ack => {}
            Op::Disconnect => {
                // What the peer acknowledged completes rather than
                // flushes once the kernel's notices for it are read (they
                // come with the acknowledgement, or as the NIC finishes).
                let _ = self.settle_for(h.ack, DISCONNECT_SETTLE);
                self.complete_upto(h.ack);
                if !self.local_disconnect.load(Ordering::Acquire) {
                    let _ = self.disconnect();
                }
                return Err(End::Orderly);
            }
            Op::ConnReq | Op::ConnAccept | Op::ConnReject => {
                return Err(End::Broken("protocol error: handshake frame on a live stream".into()));
            }
        }
        self.done_frame(&h, op);
        Ok(Step::More)
    }

    /// A send or write-with-immediate needs the oldest posted receive.
    fn on_need_recv(
        &self,
        rx: &mut RxState,
        h: Header,
        since: Option<Instant>,
    ) -> Result<Step, End> {
        let op = h.validate().map_err(|e| End::Broken(format!("protocol error: {e}")))?;
        let wr = self.recvs.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
        let Some(wr) = wr else {
            let since = since.unwrap_or_else(Instant::now);
            if since.elapsed() >= self.ia.cfg.rnr_timeout || self.state() != EpState::Connected {
                self.nak(&h, Status::ReceiverNotReady)?;
                return Err(End::Refused(format!(
                    "no receive posted within {:?} (receiver not ready)",
                    self.ia.cfg.rnr_timeout
                )));
            }
            // Let the peer's earlier DTOs complete while we wait for a buffer.
            let mut w = true;
            self.send_ack_if_wanted(&mut w).map_err(|e| io_end("send ack", e))?;
            rx.phase = Phase::NeedRecv { h, since: Some(since) };
            self.stall(since + self.ia.cfg.rnr_timeout);
            // A receive posted while we announced the stall is taken now.
            if self.recvs.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                return Ok(Step::Stalled);
            }
            self.unstall();
            return Ok(Step::More);
        };
        self.unstall();
        let len = u64::from(h.len);
        let c = DtoCompletion {
            ep: self.id,
            cookie: Cookie(wr.cookie),
            op: if op == Op::Send { DtoOp::Recv } else { DtoOp::RecvWriteImm },
            status: Status::Success,
            bytes: len,
            imm: (op == Op::WriteImm).then_some(h.arg0),
            solicited: h.flags & F_SOLICITED != 0,
            rail: None,
        };
        if op == Op::WriteImm {
            self.complete(c);
            self.done_frame(&h, op);
        } else if len <= wr.total && rx.avail() as u64 >= len {
            // The whole message is buffered (every small send): placed and
            // completed at once, with no placing phase to go through.
            let mut at = rx.start;
            let mut left = len;
            for s in &wr.segs {
                if left == 0 {
                    break;
                }
                let n = left.min(s.len);
                let src = &rx.buf[at..at + n as usize];
                if let Err(e) = s.region.write(s.off, src) {
                    // The receive is owed its completion: the end gives it.
                    rx.phase = Phase::Drain { h, left: 0, then: Then::Recv(c) };
                    return Err(End::Broken(e.to_string()));
                }
                at += n as usize;
                left -= n;
            }
            rx.start = at;
            self.complete(c);
            self.done_frame(&h, op);
        } else if len > wr.total {
            rx.phase = Phase::Drain { h, left: len, then: Then::TooSmall(c) };
        } else {
            rx.phase =
                Phase::Place { h, segs: wr.segs, idx: 0, at: 0, left: len, then: Then::Recv(c) };
        }
        Ok(Step::More)
    }

    fn nak(&self, h: &Header, status: Status) -> Result<(), End> {
        let mut n = Header::new(Op::Nak);
        n.seq = h.seq;
        n.status = status.code();
        // The NAKed request counts as handled.
        self.respond(n, Segs::new(), Some(h.seq)).map_err(|e| io_end("send nak", e))
    }

    fn on_read_req(&self, h: &Header) -> Result<(), End> {
        if h.arg0 > MAX_PAYLOAD {
            return Err(End::Broken("protocol error: read longer than the frame limit".into()));
        }
        let checked = match self.ia.keys.lookup(h.key) {
            None => Err(Status::BadKey),
            Some(l) => {
                l.check_remote(self.pz_id, Access::REMOTE_READ, h.addr, h.arg0).map(|off| (l, off))
            }
        };
        match checked {
            Err(status) => self.nak(h, status),
            Ok((l, off)) => {
                let mut resp = Header::new(Op::ReadResp);
                resp.seq = h.seq;
                resp.len = h.arg0 as u32;
                let mut segs = Segs::new();
                if h.arg0 > 0 {
                    segs.push(Seg { region: l.region.clone(), off, len: h.arg0 });
                }
                self.respond(resp, segs, Some(h.seq)).map_err(|e| io_end("send read response", e))
            }
        }
    }

    fn on_atomic(&self, h: &Header, op: Op) -> Result<(), End> {
        let checked = match self.ia.keys.lookup(h.key) {
            None => Err(Status::BadKey),
            Some(l) => l
                .check_remote(self.pz_id, Access::REMOTE_ATOMIC, h.addr, 8)
                .and_then(|off| if off % 8 == 0 { Ok((l, off)) } else { Err(Status::OutOfBounds) }),
        };
        match checked {
            Err(status) => self.nak(h, status),
            Ok((l, off)) => {
                let word = l.region.atomic_u64(off).map_err(|e| End::Broken(e.to_string()))?;
                // Values are little-endian in memory on every platform.
                let mut cur = word.load(Ordering::Acquire);
                let old = loop {
                    let old = u64::from_le(cur);
                    let new = if op == Op::FetchAdd {
                        old.wrapping_add(h.arg0)
                    } else if old == h.arg0 {
                        h.arg1
                    } else {
                        break old;
                    };
                    match word.compare_exchange_weak(
                        cur,
                        new.to_le(),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => break old,
                        Err(v) => cur = v,
                    }
                };
                let mut resp = Header::new(Op::AtomicResp);
                resp.seq = h.seq;
                resp.arg0 = old;
                self.respond(resp, Segs::new(), Some(h.seq))
                    .map_err(|e| io_end("send atomic response", e))
            }
        }
    }

    /// Completes, as successful, every in-flight request up to `ack` that
    /// needs no response of its own.
    /// Called by the receive side with an acknowledgement it has applied.
    #[inline]
    pub(crate) fn complete_upto(&self, ack: u64) {
        match self.zc() {
            None => self.release_plain(ack),
            Some(_) => {
                self.acked_applied.fetch_max(ack, Ordering::AcqRel);
                self.release_upto(ack);
            }
        }
    }

    /// Completes, as successful, every in-flight request up to `ack` that
    /// needs no response of its own and whose payload the kernel no longer
    /// reads (zero-copy sends wait for its notice). With zero-copy sends,
    /// other threads than the receive side complete too (as notices come),
    /// so taking the requests out and reporting them is one step under the
    /// `completing` lock: completions stay in order.
    pub(crate) fn release_upto(&self, ack: u64) {
        match self.zc() {
            None => self.release_plain(ack),
            Some(z) => {
                let _one = self.completing.lock().unwrap_or_else(|e| e.into_inner());
                self.release_plain(z.gate(ack));
            }
        }
    }

    /// Takes the in-flight requests up to `ack` that need no response out
    /// and reports them.
    fn release_plain(&self, ack: u64) {
        let mut done: SmallVec<[DtoCompletion; 8]> = SmallVec::new();
        {
            let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(f) = inf.front() {
                if f.seq > ack || matches!(f.op, DtoOp::RdmaRead | DtoOp::FetchAdd | DtoOp::CmpSwap)
                {
                    break;
                }
                let f = inf.pop_front().expect("front");
                if f.signalled {
                    done.push(self.dto(f.cookie, f.op, Status::Success, f.bytes));
                }
            }
        }
        for c in done {
            self.complete(c);
        }
    }

    /// The in-flight entry a response answers (everything before it completed).
    fn answered(&self, seq: u64) -> Result<Inflight, End> {
        self.settle_zerocopy(seq.saturating_sub(1))?;
        self.complete_upto(seq.saturating_sub(1));
        let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        // Reads and atomics before `seq` that are still here were skipped by the peer.
        match inf.front() {
            Some(f) if f.seq == seq => Ok(inf.pop_front().expect("front")),
            _ => Err(End::Broken(format!("protocol error: response to unknown request {seq}"))),
        }
    }

    /// Waits until the kernel is done with the pages of zero-copy requests
    /// up to `seq` (so that they complete before a later response). Each
    /// such payload ends its record (`MSG_EOR`), so its notice waits only
    /// for its own bytes' acknowledgement, which the response's segment
    /// carried: the notices are queued before the response is read, or
    /// come as the NIC finishes sending (a wait of microseconds; longer
    /// only while a poster that sent is preempted before it records its
    /// call). A kernel that holds them for [`ZEROCOPY_SETTLE`] breaks the
    /// connection.
    fn settle_zerocopy(&self, seq: u64) -> Result<(), End> {
        if self.settle_for(seq, ZEROCOPY_SETTLE) {
            return Ok(());
        }
        Err(End::Broken(format!(
            "the kernel kept the pages of zero-copy sends for {ZEROCOPY_SETTLE:?} after the peer answered"
        )))
    }

    /// Reads the kernel's zero-copy notices until the requests up to `seq`
    /// may complete, for at most `limit`. Returns whether they may.
    pub(crate) fn settle_for(&self, seq: u64, limit: Duration) -> bool {
        let Some((tx, z)) = self.tx.get().and_then(|t| Some((t, t.zc.as_ref()?))) else {
            return true;
        };
        let start = Instant::now();
        loop {
            if z.gate(seq) >= seq {
                return true;
            }
            if z.reap(tx.stream().as_fd()).is_err() {
                return false;
            }
            if z.gate(seq) >= seq {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// A response that does not fit the request it names breaks the
    /// connection; the request goes back so that the break flushes it
    /// (every posted DTO completes exactly once).
    fn unanswered(&self, f: Inflight) {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner()).push_front(f);
    }

    fn on_response(&self, h: &Header, op: Op) -> Result<(), End> {
        if op == Op::Nak {
            // A NAKed write or send completes after the kernel is done
            // with its own pages too.
            self.settle_zerocopy(h.seq)?;
        }
        let f = self.answered(h.seq)?;
        let mut c = self.dto(f.cookie, f.op, Status::Success, f.bytes);
        if op == Op::Nak {
            c.status = Status::from_code(h.status).unwrap_or(Status::RemoteAccess);
            if c.status.is_ok() {
                c.status = Status::RemoteAccess;
            }
            // Errors are reported even for suppressed DTOs.
            self.complete(c);
            return Ok(());
        }
        if !matches!(f.op, DtoOp::FetchAdd | DtoOp::CmpSwap) {
            self.unanswered(f);
            return Err(End::Broken("protocol error: atomic response does not match".into()));
        }
        if let Some(s) = f.dest.first() {
            let _ = s.region.write(s.off, &h.arg0.to_le_bytes());
        }
        c.imm = Some(h.arg0);
        if f.signalled {
            self.complete(c);
        }
        Ok(())
    }

    /// Ends the connection: flushes everything outstanding, posts one final
    /// event. Runs once, in whichever thread saw the end.
    pub(crate) fn finish(&self, end: End) {
        self.finish_owing(end, None);
    }

    /// Completes a DTO the end of the connection caught in the middle.
    pub(crate) fn complete_ended(&self, mut c: DtoCompletion, status: Status) {
        c.status = status;
        c.bytes = 0;
        self.complete(c);
    }

    /// [`EpShared::finish`], also completing `owed` (a receive or read that
    /// was being placed when the stream ended) with the end's status.
    pub(crate) fn finish_owing(&self, end: End, owed: Option<DtoCompletion>) {
        // The receive side's own owed completion, unless a reader holds it
        // (that reader completes it when it sees the end: `drive_rx`).
        let owed = owed.or_else(|| {
            self.rx.try_lock().ok().and_then(|mut g| g.as_mut().and_then(RxState::take_owed))
        });
        if self.ended.swap(true, Ordering::AcqRel) {
            if let Some(c) = owed {
                self.complete_ended(c, Status::Flushed);
            }
            return;
        }
        let (status, ev) = match &end {
            End::Orderly => {
                self.set_state(EpState::Disconnected);
                (Status::Flushed, Event::Disconnected { ep: self.id })
            }
            End::Broken(why) | End::Refused(why) => {
                self.set_state(EpState::Broken);
                (Status::Broken, Event::Broken { ep: self.id, reason: why.clone() })
            }
        };
        if let Some(tx) = self.tx.get() {
            tx.close();
        }
        // Zero-copy payloads the kernel has yet to send would go on being
        // read from memory whose DTOs now flush (the user may reuse it):
        // such a stream is aborted, which drops them.
        let zc_held = self
            .tx
            .get()
            .is_some_and(|t| t.zc.as_ref().is_some_and(|z| z.holds(t.stream().as_fd())));
        match end {
            End::Orderly | End::Refused(_) if !zc_held => self.shutdown_stream(),
            _ => self.abort_stream(),
        }
        if let Some(c) = owed {
            self.complete_ended(c, status);
        }
        {
            // In order after any completions a reaper is reporting.
            let _one = self.completing.lock().unwrap_or_else(|e| e.into_inner());
            let pending: Vec<Inflight> =
                self.inflight.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
            for f in pending {
                self.complete(self.dto(f.cookie, f.op, status, 0));
            }
        }
        let recvs: Vec<_> =
            self.recvs.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        for wr in recvs {
            self.complete(self.dto(wr.cookie, DtoOp::Recv, Status::Flushed, 0));
        }
        self.detach();
        self.push_conn(ev);
        self.kick();
    }
}
