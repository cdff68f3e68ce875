//! The TCP endpoint: connection set-up, the post path, and the shared state
//! its reader ([`crate::rx`]) and sender threads work on.

use crate::ia::IaShared;
use crate::tx::{Seg, Segs, Tx};
use crate::wire::{self, F_ACK_REQ, F_SOLICITED, HDR, Header, Op};
use rmr_api::{
    Access, DtoCompletion, DtoFlags, DtoOp, Ep, EpAttr, EpEvds, EpId, EpState, Error, Event,
    Result, RmrContext, Sge, SoftEvd, Status, check_local_sges,
};
use std::any::Any;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A send-side DTO waiting for its acknowledgement or response.
pub(crate) struct Inflight {
    pub(crate) seq: u64,
    pub(crate) cookie: u64,
    pub(crate) op: DtoOp,
    pub(crate) signalled: bool,
    pub(crate) bytes: u64,
    /// Where a read response or an atomic's old value lands.
    pub(crate) dest: Segs,
}

/// A posted receive.
pub(crate) struct RecvWr {
    pub(crate) cookie: u64,
    pub(crate) segs: Segs,
    pub(crate) total: u64,
}

pub(crate) struct EpShared {
    pub(crate) id: EpId,
    pub(crate) ia: Arc<IaShared>,
    pub(crate) pz_id: u64,
    pub(crate) evds: EpEvds,
    state: AtomicU8,
    pub(crate) tx: OnceLock<Tx>,
    pub(crate) peer: OnceLock<SocketAddr>,
    pub(crate) inflight: Mutex<VecDeque<Inflight>>,
    pub(crate) recvs: Mutex<VecDeque<RecvWr>>,
    pub(crate) recv_cv: Condvar,
    /// Highest peer request sequence number fully handled here.
    pub(crate) rx_done: AtomicU64,
    /// Highest `rx_done` value carried to the peer in any frame.
    pub(crate) acked_sent: AtomicU64,
    pub(crate) ended: AtomicBool,
    pub(crate) local_disconnect: AtomicBool,
}

fn state_from(v: u8) -> EpState {
    match v {
        0 => EpState::Unconnected,
        1 => EpState::Pending,
        2 => EpState::Connected,
        3 => EpState::Disconnected,
        _ => EpState::Broken,
    }
}

fn state_to(s: EpState) -> u8 {
    match s {
        EpState::Unconnected => 0,
        EpState::Pending => 1,
        EpState::Connected => 2,
        EpState::Disconnected => 3,
        EpState::Broken => 4,
    }
}

pub(crate) fn push(evd: &Arc<dyn rmr_api::Evd>, ev: Event) {
    if let Some(s) = evd.as_any().downcast_ref::<SoftEvd>() {
        s.push(ev);
    }
}

/// Socket options every EP stream gets: no Nagle, a bounded time to detect a
/// dead peer or a cut link.
pub(crate) fn tune(stream: &TcpStream, user_timeout: Duration) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let s = socket2::SockRef::from(stream);
    let idle = (user_timeout / 2).max(Duration::from_secs(1));
    let ka = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(Duration::from_secs(1))
        .with_retries(3);
    s.set_tcp_keepalive(&ka)?;
    s.set_tcp_user_timeout(Some(user_timeout))?;
    if let Some(sz) = std::env::var("RMR_TCP_SOCKBUF").ok().and_then(|v| v.parse::<usize>().ok()) {
        s.set_send_buffer_size(sz)?;
        s.set_recv_buffer_size(sz)?;
    }
    Ok(())
}

impl EpShared {
    pub(crate) fn state(&self) -> EpState {
        state_from(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set_state(&self, s: EpState) {
        self.state.store(state_to(s), Ordering::Release);
    }

    fn cas_state(&self, from: EpState, to: EpState) -> bool {
        self.state
            .compare_exchange(state_to(from), state_to(to), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn tx(&self) -> Result<&Tx> {
        self.tx.get().ok_or(Error::NotConnected)
    }

    fn check_connected(&self) -> Result<()> {
        match self.state() {
            EpState::Connected => Ok(()),
            EpState::Broken => Err(Error::Broken("endpoint is broken".into())),
            _ => Err(Error::NotConnected),
        }
    }

    /// Sends a response-type frame (ack, nak, read response, atomic response).
    pub(crate) fn respond(&self, mut h: Header, segs: Segs) -> std::io::Result<()> {
        let tx = self.tx.get().expect("connected");
        let mut st = tx.lock();
        h.ack = self.rx_done.load(Ordering::Acquire);
        self.acked_sent.fetch_max(h.ack, Ordering::AcqRel);
        tx.push(&mut st, &h, segs, false)
    }

    /// Posts a request frame: assigns its sequence number and records it in
    /// flight under the transmit lock, so wire order, sequence order and
    /// in-flight order agree.
    fn post_request(
        &self,
        mut h: Header,
        payload: Segs,
        mut inflight: Inflight,
        flags: DtoFlags,
    ) -> Result<()> {
        self.check_connected()?;
        let tx = self.tx()?;
        let mut st = tx.lock();
        let seq = st.next_seq;
        {
            let mut inf = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            if inf.len() >= self.ia.cfg.max_dtos {
                return Err(Error::QueueFull);
            }
            // Ask for an ack when the user wants a completion, and now and then so the
            // window of suppressed DTOs keeps draining.
            if !flags.contains(DtoFlags::SUPPRESS)
                || seq % 64 == 0
                || inf.len() >= self.ia.cfg.max_dtos / 4
            {
                h.flags |= F_ACK_REQ;
            }
            inflight.seq = seq;
            inf.push_back(inflight);
        }
        st.next_seq += 1;
        h.seq = seq;
        h.ack = self.rx_done.load(Ordering::Acquire);
        self.acked_sent.fetch_max(h.ack, Ordering::AcqRel);
        match tx.push(&mut st, &h, payload, false) {
            Ok(()) => Ok(()),
            Err(e) => {
                drop(st);
                let msg = format!("send failed: {e}");
                self.shutdown_stream();
                Err(Error::Broken(msg))
            }
        }
    }

    pub(crate) fn shutdown_stream(&self) {
        if let Some(tx) = self.tx.get() {
            let _ = tx.stream().shutdown(std::net::Shutdown::Both);
        }
    }

    /// Completes `c` on the request EVD.
    pub(crate) fn complete(&self, c: DtoCompletion) {
        let evd = if matches!(c.op, DtoOp::Recv | DtoOp::RecvWriteImm) {
            &self.evds.recv
        } else {
            &self.evds.request
        };
        push(evd, Event::Dto(c));
    }

    pub(crate) fn dto(&self, cookie: u64, op: DtoOp, status: Status, bytes: u64) -> DtoCompletion {
        DtoCompletion { ep: self.id, cookie, op, status, bytes, imm: None, solicited: false }
    }

    /// Makes the connection live: threads started, Established posted.
    pub(crate) fn start(self: &Arc<Self>, stream: TcpStream, peer_pd: Vec<u8>) -> Result<()> {
        let peer = stream.peer_addr().map_err(|e| Error::io("peer_addr", e))?;
        let rd = stream.try_clone().map_err(|e| Error::io("clone stream", e))?;
        let _ = self.peer.set(peer);
        if self.tx.set(Tx::new(stream)).is_err() {
            return Err(Error::invalid("endpoint already connected"));
        }
        self.set_state(EpState::Connected);
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("rmr-tcp-rx{}", self.id.0))
            .stack_size(256 << 10)
            .spawn(move || me.reader_loop(rd))
            .map_err(|e| Error::io("spawn reader", e))?;
        let me = self.clone();
        std::thread::Builder::new()
            .name(format!("rmr-tcp-tx{}", self.id.0))
            .stack_size(256 << 10)
            .spawn(move || {
                if let Err(e) = me.tx.get().expect("set").run_sender() {
                    if !me.ended.load(Ordering::Acquire) {
                        me.shutdown_stream();
                        let _ = e;
                    }
                }
            })
            .map_err(|e| Error::io("spawn sender", e))?;
        push(&self.evds.conn, Event::Established { ep: self.id, private_data: peer_pd });
        Ok(())
    }

    /// Orderly close from this side.
    pub(crate) fn disconnect(&self) -> Result<()> {
        if !self.cas_state(EpState::Connected, EpState::Disconnected) {
            return Err(Error::NotConnected);
        }
        self.local_disconnect.store(true, Ordering::Release);
        let tx = self.tx()?;
        let mut st = tx.lock();
        let mut h = Header::new(Op::Disconnect);
        h.ack = self.rx_done.load(Ordering::Acquire);
        if tx.push(&mut st, &h, Segs::new(), true).is_err() {
            drop(st);
            self.shutdown_stream();
        }
        // A peer that never answers must not keep the reader forever.
        let _ = tx.stream().set_read_timeout(Some(Duration::from_secs(3)));
        Ok(())
    }
}

/// An endpoint of the TCP backend. Dropping the last handle disconnects.
pub struct TcpEp {
    pub(crate) sh: Arc<EpShared>,
}

impl TcpEp {
    pub(crate) fn create(ia: Arc<IaShared>, pz_id: u64, evds: EpEvds) -> Arc<dyn Ep> {
        Arc::new(TcpEp {
            sh: Arc::new(EpShared {
                id: EpId::fresh(),
                ia,
                pz_id,
                evds,
                state: AtomicU8::new(0),
                tx: OnceLock::new(),
                peer: OnceLock::new(),
                inflight: Mutex::new(VecDeque::new()),
                recvs: Mutex::new(VecDeque::new()),
                recv_cv: Condvar::new(),
                rx_done: AtomicU64::new(0),
                acked_sent: AtomicU64::new(0),
                ended: AtomicBool::new(false),
                local_disconnect: AtomicBool::new(false),
            }),
        })
    }

    fn segs(&self, local: &[Sge<'_>]) -> Segs {
        local
            .iter()
            .filter(|s| s.len > 0)
            .map(|s| Seg {
                region: s.lmr.region().clone(),
                off: s.lmr.offset() + s.offset,
                len: s.len,
            })
            .collect()
    }

    fn check(&self, local: &[Sge<'_>], need: Access) -> Result<u64> {
        let total = check_local_sges(local, self.sh.pz_id, need, self.sh.ia.attr.max_sges)?;
        if total > wire::MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "{total} bytes exceed the {} limit",
                wire::MAX_PAYLOAD
            )));
        }
        Ok(total)
    }

    fn remote_hdr(op: Op, remote: &RmrContext, remote_offset: u64, len: u64) -> Result<Header> {
        if remote_offset.checked_add(len).is_none_or(|e| e > remote.len) {
            return Err(Error::OutOfBounds { offset: remote_offset, len, limit: remote.len });
        }
        let mut h = Header::new(op);
        h.key = remote.key();
        h.addr = remote.addr + remote_offset;
        Ok(h)
    }

    fn inflight(cookie: u64, op: DtoOp, flags: DtoFlags, bytes: u64, dest: Segs) -> Inflight {
        Inflight { seq: 0, cookie, op, signalled: !flags.contains(DtoFlags::SUPPRESS), bytes, dest }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &self,
        op: Op,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        args: (u64, u64),
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        if result.len != 8 {
            return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
        }
        if (remote.addr + remote_offset) % 8 != 0 {
            return Err(Error::invalid("atomic target must be 8-byte aligned"));
        }
        self.check(&[result], Access::LOCAL_WRITE)?;
        let mut h = Self::remote_hdr(op, remote, remote_offset, 8)?;
        (h.arg0, h.arg1) = args;
        let dop = if op == Op::FetchAdd { DtoOp::FetchAdd } else { DtoOp::CmpSwap };
        let inf = Self::inflight(cookie, dop, flags, 8, self.segs(&[result]));
        self.sh.post_request(h, Segs::new(), inf, flags)
    }
}

impl Drop for TcpEp {
    fn drop(&mut self) {
        let _ = self.sh.disconnect();
    }
}

fn handshake_read(stream: &mut TcpStream) -> Result<(Op, Vec<u8>)> {
    let mut hb = [0u8; HDR];
    stream.read_exact(&mut hb).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::Timeout,
        _ => Error::io("connection handshake", e),
    })?;
    let h = Header::decode(&hb);
    let op = h.validate().map_err(|e| Error::Protocol(e.to_string()))?;
    let mut pd = vec![0u8; h.len as usize];
    stream.read_exact(&mut pd).map_err(|e| Error::io("connection handshake", e))?;
    Ok((op, pd))
}

pub(crate) fn handshake_write(stream: &mut TcpStream, op: Op, pd: &[u8]) -> std::io::Result<()> {
    let mut h = Header::new(op);
    h.len = pd.len() as u32;
    if op == Op::ConnReq {
        h.arg0 = wire::MAGIC;
    }
    let mut buf = Vec::with_capacity(HDR + pd.len());
    buf.extend_from_slice(&h.encode());
    buf.extend_from_slice(pd);
    stream.write_all(&buf)
}

impl Ep for TcpEp {
    fn id(&self) -> EpId {
        self.sh.id
    }

    fn attr(&self) -> EpAttr {
        let a = &self.sh.ia.attr;
        EpAttr {
            max_msg_size: a.max_msg_size,
            max_dtos: self.sh.ia.cfg.max_dtos,
            max_recvs: self.sh.ia.cfg.max_recvs,
            max_sges: a.max_sges,
            notes: vec![],
        }
    }

    fn state(&self) -> EpState {
        self.sh.state()
    }

    fn connect(&self, remote: &str, service: u16, pd: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        if pd.len() > wire::MAX_PRIVATE {
            return Err(Error::invalid(format!("private data over {} bytes", wire::MAX_PRIVATE)));
        }
        let ip: IpAddr = remote.parse().map_err(|_| Error::BadSpec {
            spec: remote.into(),
            why: "expected an IP address".into(),
        })?;
        if !self.sh.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("endpoint is not in the unconnected state"));
        }
        let res = (|| {
            let start = Instant::now();
            let to = SocketAddr::new(ip, service);
            let sock = socket2::Socket::new(
                socket2::Domain::for_address(to),
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )
            .map_err(|e| Error::io("socket", e))?;
            sock.bind(&SocketAddr::new(self.sh.ia.ip, 0).into())
                .map_err(|e| Error::io(format!("bind {}", self.sh.ia.ip), e))?;
            sock.connect_timeout(&to.into(), timeout).map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Error::Timeout,
                _ => Error::io(format!("connect {to}"), e),
            })?;
            let mut stream: TcpStream = sock.into();
            tune(&stream, self.sh.ia.cfg.user_timeout)
                .map_err(|e| Error::io("socket options", e))?;
            handshake_write(&mut stream, Op::ConnReq, pd)
                .map_err(|e| Error::io("send request", e))?;
            let left = timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
            stream.set_read_timeout(Some(left)).map_err(|e| Error::io("set timeout", e))?;
            let (op, peer_pd) = handshake_read(&mut stream)?;
            stream.set_read_timeout(None).map_err(|e| Error::io("set timeout", e))?;
            match op {
                Op::ConnAccept => Ok((stream, peer_pd)),
                Op::ConnReject => {
                    push(
                        &self.sh.evds.conn,
                        Event::Rejected { ep: self.sh.id, private_data: peer_pd.clone() },
                    );
                    Err(Error::Rejected { private_data: peer_pd })
                }
                other => Err(Error::Protocol(format!("unexpected {other:?} in handshake"))),
            }
        })();
        match res {
            Ok((stream, peer_pd)) => {
                self.sh.start(stream, peer_pd.clone())?;
                Ok(peer_pd)
            }
            Err(e) => {
                self.sh.set_state(EpState::Unconnected);
                Err(e)
            }
        }
    }

    fn disconnect(&self) -> Result<()> {
        self.sh.disconnect()
    }

    fn post_send(&self, local: &[Sge<'_>], cookie: u64, flags: DtoFlags) -> Result<()> {
        let total = self.check(local, Access::empty())?;
        let mut h = Header::new(Op::Send);
        h.len = total as u32;
        if flags.contains(DtoFlags::SOLICITED) {
            h.flags |= F_SOLICITED;
        }
        let inf = Self::inflight(cookie, DtoOp::Send, flags, total, Segs::new());
        self.sh.post_request(h, self.segs(local), inf, flags)
    }

    fn post_recv(&self, local: &[Sge<'_>], cookie: u64, _flags: DtoFlags) -> Result<()> {
        let total = self.check(local, Access::LOCAL_WRITE)?;
        match self.sh.state() {
            EpState::Disconnected | EpState::Broken => return Err(Error::NotConnected),
            _ => {}
        }
        let mut q = self.sh.recvs.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= self.sh.ia.cfg.max_recvs {
            return Err(Error::QueueFull);
        }
        q.push_back(RecvWr { cookie, segs: self.segs(local), total });
        drop(q);
        self.sh.recv_cv.notify_one();
        Ok(())
    }

    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let total = self.check(local, Access::empty())?;
        let mut h = Self::remote_hdr(Op::Write, remote, remote_offset, total)?;
        h.len = total as u32;
        let inf = Self::inflight(cookie, DtoOp::RdmaWrite, flags, total, Segs::new());
        self.sh.post_request(h, self.segs(local), inf, flags)
    }

    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let total = self.check(local, Access::LOCAL_WRITE)?;
        let mut h = Self::remote_hdr(Op::ReadReq, remote, remote_offset, total)?;
        h.arg0 = total;
        let inf = Self::inflight(cookie, DtoOp::RdmaRead, flags, total, self.segs(local));
        self.sh.post_request(h, Segs::new(), inf, flags)
    }

    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        imm: u32,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let total = self.check(local, Access::empty())?;
        let mut h = Self::remote_hdr(Op::WriteImm, remote, remote_offset, total)?;
        h.len = total as u32;
        h.arg0 = u64::from(imm);
        let inf = Self::inflight(cookie, DtoOp::RdmaWrite, flags, total, Segs::new());
        self.sh.post_request(h, self.segs(local), inf, flags)
    }

    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        add: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        self.atomic(Op::FetchAdd, result, remote, remote_offset, (add, 0), cookie, flags)
    }

    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        compare: u64,
        swap: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        self.atomic(Op::CmpSwap, result, remote, remote_offset, (compare, swap), cookie, flags)
    }

    fn peer_address(&self) -> Option<String> {
        self.sh.peer.get().map(|p| p.ip().to_string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
