//! The receive side of an endpoint: one reader thread per stream. It places
//! RDMA payloads straight from the socket into registered memory after
//! checking key, rights, protection zone and bounds; anything that fails a
//! check is drained from the stream and answered with a NAK, never written.

use crate::ep::{EpShared, Inflight, push};
use crate::tx::Segs;
use crate::wire::{F_ACK_REQ, F_SOLICITED, HDR, Header, MAX_PAYLOAD, Op};
use rmr_api::{Access, DtoCompletion, DtoOp, EpState, Event, Status};
use smallvec::SmallVec;
use std::io::{self, BufReader, Read};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Why the reader stopped.
enum End {
    Orderly,
    Broken(String),
}

fn io_end(what: &str, e: io::Error) -> End {
    End::Broken(format!("{what}: {e}"))
}

type Rx = BufReader<TcpStream>;

fn drain(r: &mut Rx, len: u64) -> io::Result<()> {
    let n = io::copy(&mut r.by_ref().take(len), &mut io::sink())?;
    if n != len {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream ended inside a payload"));
    }
    Ok(())
}

/// Reads `len` bytes into the segments, in order.
fn scatter(r: &mut Rx, segs: &Segs, mut len: u64) -> io::Result<()> {
    for s in segs {
        if len == 0 {
            break;
        }
        let n = len.min(s.len);
        match s.region.read_exact_from(s.off, n, r) {
            Ok(res) => res?,
            Err(e) => return Err(io::Error::other(e.to_string())),
        }
        len -= n;
    }
    Ok(())
}

impl EpShared {
    pub(crate) fn reader_loop(self: std::sync::Arc<Self>, stream: TcpStream) {
        let mut r = BufReader::with_capacity(64 << 10, stream);
        let end = self.read_frames(&mut r);
        self.finish(end);
    }

    fn send_ack_if_wanted(&self, wanted: &mut bool) -> io::Result<()> {
        if *wanted && self.rx_done.load(Ordering::Acquire) > self.acked_sent.load(Ordering::Acquire)
        {
            self.respond(Header::new(Op::Ack), Segs::new())?;
        }
        *wanted = false;
        Ok(())
    }

    fn read_frames(&self, r: &mut Rx) -> End {
        let mut ack_wanted = false;
        let mut expect = 1u64;
        loop {
            // Before blocking for more input, acknowledge what was asked for: acks of a
            // burst are coalesced into one.
            if r.buffer().is_empty() {
                if let Err(e) = self.send_ack_if_wanted(&mut ack_wanted) {
                    return io_end("send ack", e);
                }
            }
            let mut hb = [0u8; HDR];
            if let Err(e) = r.read_exact(&mut hb) {
                return match e.kind() {
                    io::ErrorKind::UnexpectedEof
                        if self.local_disconnect.load(Ordering::Acquire) =>
                    {
                        End::Orderly
                    }
                    io::ErrorKind::UnexpectedEof => {
                        End::Broken("peer closed the connection".into())
                    }
                    _ => io_end("read", e),
                };
            }
            let h = Header::decode(&hb);
            let op = match h.validate() {
                Ok(op) => op,
                Err(e) => return End::Broken(format!("protocol error: {e}")),
            };
            if op.is_request() {
                if h.seq != expect {
                    return End::Broken(format!(
                        "protocol error: sequence {} expected {expect}",
                        h.seq
                    ));
                }
                expect += 1;
                if h.flags & F_ACK_REQ != 0 {
                    ack_wanted = true;
                }
            }
            let res = match op {
                Op::Send => self.on_send(r, &h),
                Op::Write | Op::WriteImm => self.on_write(r, &h, op == Op::WriteImm),
                Op::ReadReq => self.on_read_req(&h),
                Op::FetchAdd | Op::CmpSwap => self.on_atomic(&h, op),
                Op::ReadResp | Op::AtomicResp | Op::Nak => self.on_response(r, &h, op),
                Op::Ack => {
                    self.complete_upto(h.ack);
                    Ok(())
                }
                Op::Disconnect => {
                    self.complete_upto(h.ack);
                    if !self.local_disconnect.load(Ordering::Acquire) {
                        let _ = self.disconnect();
                    }
                    return End::Orderly;
                }
                Op::ConnReq | Op::ConnAccept | Op::ConnReject => {
                    Err(End::Broken("protocol error: handshake frame on a live stream".into()))
                }
            };
            if let Err(end) = res {
                return end;
            }
            if op.is_request() {
                self.rx_done.store(h.seq, Ordering::Release);
            }
            if !matches!(op, Op::Ack | Op::Disconnect) {
                self.complete_upto(h.ack);
            }
        }
    }

    fn nak(&self, h: &Header, status: Status) -> Result<(), End> {
        let mut n = Header::new(Op::Nak);
        n.seq = h.seq;
        n.status = status.code();
        // The NAKed request counts as handled.
        self.rx_done.store(h.seq, Ordering::Release);
        self.respond(n, Segs::new()).map_err(|e| io_end("send nak", e))
    }

    /// Takes the oldest posted receive, waiting up to the RNR timeout.
    fn take_recv(&self) -> Option<crate::ep::RecvWr> {
        let deadline = Instant::now() + self.ia.cfg.rnr_timeout;
        let mut q = self.recvs.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(wr) = q.pop_front() {
                return Some(wr);
            }
            let now = Instant::now();
            if now >= deadline || self.state() != EpState::Connected {
                return None;
            }
            q = self.recv_cv.wait_timeout(q, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Consumes a receive for a send or a write-with-immediate. `place`
    /// reads the payload (for a send, into the receive buffer).
    fn consume_recv(
        &self,
        r: &mut Rx,
        h: &Header,
        op: DtoOp,
        imm: Option<u64>,
    ) -> Result<bool, End> {
        // Let the peer's earlier DTOs complete while we wait for a buffer.
        if r.buffer().is_empty() {
            let mut w = true;
            self.send_ack_if_wanted(&mut w).map_err(|e| io_end("send ack", e))?;
        }
        let Some(wr) = self.take_recv() else {
            if op == DtoOp::Recv {
                drain(r, u64::from(h.len)).map_err(|e| io_end("drain", e))?;
            }
            self.nak(h, Status::ReceiverNotReady)?;
            return Err(End::Broken(format!(
                "no receive posted within {:?} (receiver not ready)",
                self.ia.cfg.rnr_timeout
            )));
        };
        let len = u64::from(h.len);
        let mut c = DtoCompletion {
            ep: self.id,
            cookie: wr.cookie,
            op,
            status: Status::Success,
            bytes: len,
            imm,
            solicited: h.flags & F_SOLICITED != 0,
        };
        if op == DtoOp::Recv {
            if len > wr.total {
                drain(r, len).map_err(|e| io_end("drain", e))?;
                c.status = Status::RecvTooSmall;
                self.complete(c);
                self.nak(h, Status::RecvTooSmall)?;
                return Ok(false);
            }
            scatter(r, &wr.segs, len).map_err(|e| io_end("receive payload", e))?;
        }
        self.complete(c);
        Ok(true)
    }

    fn on_send(&self, r: &mut Rx, h: &Header) -> Result<(), End> {
        self.consume_recv(r, h, DtoOp::Recv, None).map(|_| ())
    }

    fn on_write(&self, r: &mut Rx, h: &Header, imm: bool) -> Result<(), End> {
        let len = u64::from(h.len);
        let checked = match self.ia.keys.lookup(h.key) {
            None => Err(Status::BadKey),
            Some(l) => {
                l.check_remote(self.pz_id, Access::REMOTE_WRITE, h.addr, len).map(|off| (l, off))
            }
        };
        match checked {
            Err(status) => {
                drain(r, len).map_err(|e| io_end("drain", e))?;
                self.nak(h, status)
            }
            Ok((l, off)) => {
                match l.region.read_exact_from(off, len, r) {
                    Ok(res) => res.map_err(|e| io_end("write payload", e))?,
                    Err(e) => return Err(End::Broken(e.to_string())),
                }
                if imm {
                    self.consume_recv(r, h, DtoOp::RecvWriteImm, Some(h.arg0))?;
                }
                Ok(())
            }
        }
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
                self.rx_done.store(h.seq, Ordering::Release);
                let mut segs = Segs::new();
                if h.arg0 > 0 {
                    segs.push(crate::tx::Seg { region: l.region.clone(), off, len: h.arg0 });
                }
                self.respond(resp, segs).map_err(|e| io_end("send read response", e))
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
                self.rx_done.store(h.seq, Ordering::Release);
                self.respond(resp, Segs::new()).map_err(|e| io_end("send atomic response", e))
            }
        }
    }

    /// Completes, as successful, every in-flight request up to `ack` that
    /// needs no response of its own.
    pub(crate) fn complete_upto(&self, ack: u64) {
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

    /// The in-flight entry a response answers: everything before it completed.
    fn take_answered(&self, seq: u64) -> Option<Inflight> {
        self.complete_upto(seq.saturating_sub(1));
        let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        // Reads and atomics before `seq` that are still here were skipped by the peer: a
        // protocol error, reported by the caller when the front is not `seq`.
        match inf.front() {
            Some(f) if f.seq == seq => inf.pop_front(),
            _ => None,
        }
    }

    fn on_response(&self, r: &mut Rx, h: &Header, op: Op) -> Result<(), End> {
        let Some(f) = self.take_answered(h.seq) else {
            return Err(End::Broken(format!(
                "protocol error: response to unknown request {}",
                h.seq
            )));
        };
        let mut c = self.dto(f.cookie, f.op, Status::Success, f.bytes);
        match op {
            Op::Nak => {
                c.status = Status::from_code(h.status).unwrap_or(Status::RemoteAccess);
                if c.status.is_ok() {
                    c.status = Status::RemoteAccess;
                }
                // Errors are reported even for suppressed DTOs.
                self.complete(c);
                return Ok(());
            }
            Op::ReadResp => {
                if f.op != DtoOp::RdmaRead || u64::from(h.len) != f.bytes {
                    return Err(End::Broken("protocol error: read response does not match".into()));
                }
                scatter(r, &f.dest, f.bytes).map_err(|e| io_end("read payload", e))?;
            }
            _ => {
                if !matches!(f.op, DtoOp::FetchAdd | DtoOp::CmpSwap) {
                    return Err(End::Broken(
                        "protocol error: atomic response does not match".into(),
                    ));
                }
                if let Some(s) = f.dest.first() {
                    let _ = s.region.write(s.off, &h.arg0.to_le_bytes());
                }
                c.imm = Some(h.arg0);
            }
        }
        if f.signalled {
            self.complete(c);
        }
        Ok(())
    }

    /// Ends the connection: flushes everything outstanding, posts one final event.
    fn finish(&self, end: End) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let (status, ev) = match &end {
            End::Orderly => {
                self.set_state(EpState::Disconnected);
                (Status::Flushed, Event::Disconnected { ep: self.id })
            }
            End::Broken(why) => {
                self.set_state(EpState::Broken);
                (Status::Broken, Event::Broken { ep: self.id, reason: why.clone() })
            }
        };
        if let Some(tx) = self.tx.get() {
            tx.close();
        }
        self.shutdown_stream();
        let pending: Vec<Inflight> =
            self.inflight.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        for f in pending {
            self.complete(self.dto(f.cookie, f.op, status, 0));
        }
        let recvs: Vec<_> =
            self.recvs.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        self.recv_cv.notify_all();
        for wr in recvs {
            self.complete(self.dto(wr.cookie, DtoOp::Recv, Status::Flushed, 0));
        }
        push(&self.evds.conn, ev);
    }
}
