//! Connections: the set-up exchange over a Unix-domain socket (private
//! data, the rings' memfd, the doorbells and the region tables, passed as
//! file descriptors), making the link live, the ends of a connection
//! (orderly, or broken), and the [`Driver`] a waiting thread runs.

use super::shared::*;
use crate::helper::QUICK;
use crate::helper::{Look, Tended};
use crate::ring::{CTL, Ring};
use crate::sys::{Dir, Mapping, Piece, cross};
use crate::table::PeerTable;
use crate::wire::{Hdr, Op};
use rmr_api::provider::clock::now_ns;
use rmr_api::provider::{Driver, Interest, QuickLook, WaitOn};
use rmr_api::{DtoOp, EpState, Error, Event, Result, Status};
use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer};
use rustix::net::{SendAncillaryMessage, SendFlags};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MAGIC: [u8; 8] = *b"rmr-shm1";
/// Looks at the ring a spinning waiter makes between yields (about a
/// microsecond of loads: less than one `sched_yield`).
const SPIN_LOOKS: u32 = 256;
/// Bytes of a set-up message before its private data.
const FIXED: usize = 8 + 4 + 4 + 8 + 8 + 8;
/// The most private data a set-up message carries.
pub(crate) const MAX_PRIVATE: usize = 4096;

/// What a set-up message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Hello = 1,
    Accept = 2,
    Reject = 3,
}

/// A set-up message.
#[derive(Debug)]
pub(crate) struct Msg {
    pub(crate) kind: Kind,
    pub(crate) pid: i32,
    pub(crate) pz: u64,
    pub(crate) ring: u64,
    pub(crate) probe: u64,
    pub(crate) pd: Vec<u8>,
}

/// A word every process of this library has, which a peer reads once by
/// cross-memory attach to learn whether the kernel lets it.
static PROBE: AtomicU64 = AtomicU64::new(0x726d_722d_7368_6d21);

fn probe_addr() -> u64 {
    PROBE.as_ptr() as u64
}

pub(crate) fn send_msg(
    sock: BorrowedFd<'_>,
    m: &Msg,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(FIXED + m.pd.len());
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&(m.kind as u32).to_le_bytes());
    b.extend_from_slice(&m.pid.to_le_bytes());
    b.extend_from_slice(&m.pz.to_le_bytes());
    b.extend_from_slice(&m.ring.to_le_bytes());
    b.extend_from_slice(&m.probe.to_le_bytes());
    b.extend_from_slice(&m.pd);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors"));
    }
    loop {
        match rustix::net::sendmsg(sock, &[IoSlice::new(&b)], &mut anc, SendFlags::NOSIGNAL) {
            // A signal came before anything was sent: send it again.
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map(drop).map_err(Into::into),
        }
    }
}

/// Waits up to `timeout` for a set-up message (`Ok(None)`: none came).
pub(crate) fn recv_msg(
    sock: BorrowedFd<'_>,
    timeout: Duration,
) -> Result<Option<(Msg, Vec<OwnedFd>)>> {
    // `None`: a timeout too long to tell from forever.
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let ts = deadline.and_then(|d| {
            rustix::time::Timespec::try_from(d.saturating_duration_since(Instant::now())).ok()
        });
        let mut pfd = [PollFd::new(&sock, PollFlags::IN)];
        match rustix::event::poll(&mut pfd, ts.as_ref()) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            // A signal (a profiler's, a timer's) cut the wait short: the
            // rest of it is still the caller's.
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io("poll the set-up socket", e.into())),
        }
    }
    let mut buf = vec![0u8; FIXED + MAX_PRIVATE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    // The socket is readable (the poll above): this cannot block, so no
    // signal can interrupt it.
    let r = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut buf)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| Error::io("receive a set-up message", e.into()))?;
    let mut fds = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(f) = m {
            fds.extend(f);
        }
    }
    let b = &buf[..r.bytes];
    if r.bytes == 0 {
        return Err(Error::Broken("the peer closed the set-up socket".into()));
    }
    if b.len() < FIXED || b[..8] != MAGIC {
        return Err(Error::Protocol("not an rmr shm set-up message".into()));
    }
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let kind = match u32_at(8) {
        1 => Kind::Hello,
        2 => Kind::Accept,
        3 => Kind::Reject,
        k => return Err(Error::Protocol(format!("set-up message of kind {k}"))),
    };
    let m = Msg {
        kind,
        pid: u32_at(12) as i32,
        pz: u64_at(16),
        ring: u64_at(24),
        probe: u64_at(32),
        pd: b[FIXED..].to_vec(),
    };
    Ok(Some((m, fds)))
}

/// The abstract socket name of service `service` in namespace `name`.
pub(crate) fn socket_name(name: &str, service: u16) -> Vec<u8> {
    format!("rmr-shm/{}/{name}/{service}", rustix::process::getuid().as_raw()).into_bytes()
}

/// Whether cross-memory attach reaches process `pid` (its probe word).
fn probe_cma(enabled: bool, pid: i32, addr: u64) -> std::result::Result<(), String> {
    if !enabled {
        return Err("off (cma=0)".into());
    }
    let mut v = 0u64;
    let piece = Piece { ptr: (&raw mut v).cast(), len: 8 };
    match cross(pid, Dir::Read, &[piece], addr, 8) {
        Ok(()) if v == PROBE.load(Ordering::Relaxed) => Ok(()),
        Ok(()) => Err("the peer's probe word reads wrong".into()),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            Err(format!("the kernel refuses it ({e}; see kernel.yama.ptrace_scope)"))
        }
        Err(e) => Err(format!("the kernel refuses it ({e})")),
    }
}

fn new_efd() -> Result<OwnedFd> {
    eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
        .map_err(|e| Error::io("eventfd", e.into()))
}

/// What both sides need to make a link.
pub(crate) struct Parts {
    pub(crate) map: Arc<Mapping>,
    pub(crate) ring: usize,
    /// This side produces on ring 0 (the connecting side) or ring 1.
    pub(crate) client: bool,
    pub(crate) my_efd: OwnedFd,
    pub(crate) peer_efd: OwnedFd,
    pub(crate) sock: OwnedFd,
    pub(crate) peer: Msg,
    pub(crate) peer_table: OwnedFd,
    /// The peer's pid as the kernel reports it (for cross-memory attach),
    /// or why there is none.
    pub(crate) pid: std::result::Result<i32, String>,
}

impl EpShared {
    /// Makes the connection live: the link is set, the EP joins its EVDs'
    /// drivers and the IA's helper, and `Established` is posted.
    pub(crate) fn start(self: &Arc<Self>, p: Parts) -> Result<()> {
        let ring0 = Ring::new(p.map.clone(), 0, p.ring);
        let ring1 = Ring::new(p.map.clone(), CTL + p.ring, p.ring);
        let (out, inc) = if p.client { (ring0, ring1) } else { (ring1, ring0) };
        let peer_table = PeerTable::map(&p.peer_table)
            .map_err(|e| Error::io("map the peer's region table", e))?;
        // The peer's doorbell must never block a writer (a peer could pass
        // a pipe): non-blocking whatever it is.
        let _ = rustix::fs::fcntl_setfl(&p.peer_efd, rustix::fs::OFlags::NONBLOCK);
        let cma = match &p.pid {
            Ok(pid) => probe_cma(self.ia.cfg.cma, *pid, p.peer.probe),
            Err(why) => Err(why.clone()),
        };
        if let Err(why) = &cma {
            tracing::info!(target: "rmr::shm", ep = self.id.0, why = %why, "RDMA through the rings, not cross-memory attach");
        }
        // Shared regions of the peer are fetched through its pidfd, opened
        // now (the permission is the one cross-memory attach needs).
        if let (true, true, Ok(pid)) = (self.ia.cfg.map, cma.is_ok(), &p.pid) {
            self.tx().files.attach(*pid);
        }
        let link = Link {
            _map: p.map,
            out,
            inc,
            my_efd: p.my_efd,
            peer_efd: p.peer_efd,
            sock: p.sock,
            peer_pid: p.pid.clone().unwrap_or(0),
            peer_pz: p.peer.pz,
            peer_table,
            cma,
            peer_name: format!("{} (pid {})", self.ia.name, p.peer.pid),
        };
        if self.link.set(link).is_err() {
            return Err(Error::invalid("endpoint already connected"));
        }
        let me: Arc<dyn crate::domain::Peer> = self.clone();
        self.ia.add_peer(Arc::downgrade(&me));
        self.set_state(EpState::Connected);
        let me: Arc<dyn Driver> = self.clone();
        for evd in self.distinct_evds() {
            crate::domain::soft(evd)?.add_driver(&me);
        }
        self.ia
            .helper
            .register(self.clone())
            .map_err(|e| Error::io("start the IA's progress helper", e))?;
        self.push_conn(Event::Established { ep: self.id, private_data: p.peer.pd });
        Ok(())
    }

    /// [`rmr_api::Ep::connect`].
    pub(crate) fn connect(
        self: &Arc<Self>,
        remote: &str,
        service: u16,
        pd: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        if pd.len() > MAX_PRIVATE {
            return Err(Error::invalid(format!(
                "{} bytes of private data, at most {MAX_PRIVATE}",
                pd.len()
            )));
        }
        if !self.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("endpoint is not in the unconnected state"));
        }
        let r = self.dial(remote, service, pd, timeout);
        if r.is_err() && self.state() == EpState::Pending {
            self.set_state(EpState::Unconnected);
        }
        r
    }

    fn dial(
        self: &Arc<Self>,
        remote: &str,
        service: u16,
        pd: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let _span =
            tracing::debug_span!(target: "rmr::shm", "connect", ep = self.id.0, remote, service)
                .entered();
        let start = Instant::now();
        let sock = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Error::io("socket", e.into()))?;
        let addr = rustix::net::SocketAddrUnix::new_abstract_name(&socket_name(remote, service))
            .map_err(|e| Error::io("socket name", e.into()))?;
        loop {
            match rustix::net::connect(&sock, &addr) {
                // A Unix socket stays unconnected after an interrupted
                // connect (a full listen queue makes it wait): try again.
                Err(rustix::io::Errno::INTR) => continue,
                r => {
                    break r.map_err(|e| {
                        Error::io(format!("connect to shm service {remote}/{service}"), e.into())
                    })?;
                }
            }
        }
        let ring = self.ia.cfg.ring;
        let (map, memfd) = Mapping::create("rmr-shm-rings", 2 * (CTL + ring), false)
            .map_err(|e| Error::io("create the rings", e))?;
        let my_efd = new_efd()?;
        let hello = Msg {
            kind: Kind::Hello,
            pid: rustix::process::getpid().as_raw_nonzero().get(),
            pz: self.pz_id,
            ring: ring as u64,
            probe: probe_addr(),
            pd: pd.to_vec(),
        };
        send_msg(
            sock.as_fd(),
            &hello,
            &[memfd.as_fd(), my_efd.as_fd(), self.ia.table.fd().as_fd()],
        )
        .map_err(|e| Error::io("send the set-up message", e))?;
        let left = timeout.saturating_sub(start.elapsed());
        let Some((reply, mut fds)) = recv_msg(sock.as_fd(), left)? else {
            return Err(Error::Timeout);
        };
        match reply.kind {
            Kind::Accept if fds.len() == 2 => {
                let pid = peer_identity(&sock, reply.pid)?;
                let peer_table = fds.pop().expect("2 fds");
                let peer_efd = fds.pop().expect("2 fds");
                let pd = reply.pd.clone();
                let parts = Parts {
                    pid,
                    map,
                    ring,
                    client: true,
                    my_efd,
                    peer_efd,
                    sock,
                    peer: reply,
                    peer_table,
                };
                self.start(parts)?;
                Ok(pd)
            }
            Kind::Reject => Err(Error::Rejected { private_data: reply.pd }),
            k => {
                Err(Error::Protocol(format!("set-up answer {k:?} with {} descriptors", fds.len())))
            }
        }
    }

    /// The passive side's half of [`EpShared::start`], from a peer's hello.
    pub(crate) fn accept_from(
        self: &Arc<Self>,
        sock: OwnedFd,
        hello: Msg,
        mut fds: Vec<OwnedFd>,
        pd: &[u8],
    ) -> Result<()> {
        if pd.len() > MAX_PRIVATE {
            return Err(Error::invalid(format!(
                "{} bytes of private data, at most {MAX_PRIVATE}",
                pd.len()
            )));
        }
        let ring = hello.ring as usize;
        if fds.len() != 3 || !ring.is_power_of_two() || !(64 << 10..=1 << 30).contains(&ring) {
            return Err(Error::Protocol("a malformed connection request".into()));
        }
        if !self.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("endpoint is not in the unconnected state"));
        }
        let r = (|| {
            let pid = peer_identity(&sock, hello.pid)?;
            let peer_table = fds.pop().expect("3 fds");
            let peer_efd = fds.pop().expect("3 fds");
            let memfd = fds.pop().expect("3 fds");
            let map = Mapping::map(&memfd, 2 * (CTL + ring), true)
                .map_err(|e| Error::io("map the rings", e))?;
            let my_efd = new_efd()?;
            let accept = Msg {
                kind: Kind::Accept,
                pid: rustix::process::getpid().as_raw_nonzero().get(),
                pz: self.pz_id,
                ring: ring as u64,
                probe: probe_addr(),
                pd: pd.to_vec(),
            };
            send_msg(sock.as_fd(), &accept, &[my_efd.as_fd(), self.ia.table.fd().as_fd()])
                .map_err(|e| Error::io("send the acceptance", e))?;
            let parts = Parts {
                pid,
                map,
                ring,
                client: false,
                my_efd,
                peer_efd,
                sock,
                peer: hello,
                peer_table,
            };
            self.start(parts)
        })();
        if r.is_err() && self.state() == EpState::Pending {
            self.set_state(EpState::Unconnected);
        }
        r
    }

    /// Leaves the EVDs (the connection ended).
    pub(crate) fn detach(&self) {
        if !self.detached.swap(true, Ordering::AcqRel) {
            for evd in self.distinct_evds() {
                if let Ok(s) = crate::domain::soft(evd) {
                    s.remove_driver(self);
                }
            }
        }
    }

    fn flush_recvs(&self, rx: &mut Rx) {
        // A receive a message was arriving into ends too.
        let taken = match rx.cur.take() {
            Some(Cur::Recv { recv, .. }) => Some((recv, DtoOp::Recv)),
            Some(Cur::Write { imm: Some((_, recv)), .. }) => Some((recv, DtoOp::RecvWriteImm)),
            _ => None,
        };
        if let Some((r, op)) = taken {
            let c = self.recv_done(&r, op, Status::Flushed, 0);
            self.push_recv(Event::Dto(c));
        }
        rx.ack = None;
        rx.rnr_since = None;
        for r in rx.recvs.drain(..) {
            let c = self.recv_done(&r, DtoOp::Recv, Status::Flushed, 0);
            self.push_recv(Event::Dto(c));
        }
    }

    /// An orderly disconnect from this side: everything not done is
    /// flushed, and the peer learns it after every frame already sent.
    pub(crate) fn disconnect(&self) -> Result<()> {
        if !self.cas_state(EpState::Connected, EpState::Disconnected) {
            return Err(Error::NotConnected);
        }
        let link = self.link.get().expect("a connected EP has a link");
        self.flush_requests(Status::Flushed);
        self.answer(link, Hdr::new(Op::Disconnect), Segs::new());
        {
            let mut tx = self.tx();
            if !tx.pending.is_empty() {
                // The ring is full of frames the peer has not taken: it
                // learns of the end from the set-up socket instead (and
                // takes what is in the ring first); nothing waits on it.
                tx.pending.clear();
                tx.sent = 0;
                let _ = rustix::net::shutdown(&link.sock, rustix::net::Shutdown::Both);
            }
        }
        self.flush_recvs(&mut self.rx());
        self.detach();
        self.push_conn(Event::Disconnected { ep: self.id });
        self.ia.helper.kick();
        Ok(())
    }

    /// The peer disconnected (its frame arrived).
    pub(crate) fn remote_disconnect(&self, rx: &mut Rx) {
        if self.cas_state(EpState::Connected, EpState::Disconnected) {
            self.flush_requests(Status::Flushed);
            self.flush_recvs(rx);
            self.detach();
            self.push_conn(Event::Disconnected { ep: self.id });
        }
    }

    /// The connection broke.
    pub(crate) fn broken(&self, rx: &mut Rx, reason: String) {
        if self.cas_state(EpState::Connected, EpState::Broken) {
            tracing::warn!(target: "rmr::shm", ep = self.id.0, %reason, "connection broken");
            self.flush_requests(Status::Broken);
            self.flush_recvs(rx);
            self.tx().pending.clear();
            self.detach();
            self.push_conn(Event::Broken { ep: self.id, reason });
        }
    }

    /// The set-up socket hung up: the peer's EP or process is gone. What it
    /// sent before is still taken in; without an orderly disconnect among
    /// it, the connection is broken.
    pub(crate) fn peer_gone(&self) {
        let Some(link) = self.link.get() else { return };
        let mut rx = self.rx();
        self.take_in(&mut rx, link);
        if self.state() == EpState::Connected {
            if link.inc.has_data() {
                // More than one batch: the helper comes back for the rest.
                return;
            }
            self.broken(&mut rx, "the peer's process or endpoint is gone".into());
        } else {
            self.tx().pending.clear();
        }
    }

    /// Everything ready now, on the caller's thread; true when anything moved.
    pub(crate) fn drive_now(&self) -> bool {
        let Some(link) = self.link.get() else { return false };
        // Loaded first: a locked swap on every drive would cost each
        // round trip what the flag is rarely set for.
        if self.efd_armed.load(Ordering::Relaxed) && self.efd_armed.swap(false, Ordering::AcqRel) {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&link.my_efd, &mut b);
        }
        let mut moved = false;
        if let Ok(mut rx) = self.rx.try_lock() {
            // The peer's acknowledgement line first, then the ring: every
            // answer frame it pushed before that line moved is then taken
            // in before the line is applied (and only when all was taken).
            let acked = link.out.acked().load(Ordering::SeqCst);
            let upto = link.inc.produced();
            moved |= self.take_in(&mut rx, link);
            moved |= self.apply_acked(link, acked, upto);
        }
        let mut tx = self.tx();
        if !tx.pending.is_empty() {
            moved |= self.pump(&mut tx, link);
        }
        moved
    }

    /// Applies the peer's acknowledgement line `acked` (read when the ring
    /// held `upto` bytes) once everything up to there has been taken in:
    /// every answer frame the peer pushed before it moved the line is then
    /// handled, so no request it failed is completed as a success.
    pub(crate) fn apply_acked(&self, link: &Link, acked: u64, upto: u64) -> bool {
        let taken = link.inc.consumed().wrapping_sub(upto) as i64 >= 0;
        if !taken || acked <= self.acked_seen.load(Ordering::Relaxed) {
            return false;
        }
        {
            let mut tx = self.tx();
            if acked <= tx.acked {
                return false;
            }
            tx.acked = acked;
        }
        self.acked_seen.store(acked, Ordering::Relaxed);
        self.answered(Op::AckUpTo, acked - 1, Status::Success);
        true
    }

    /// Input this side can take now: frames (unless the one at the head
    /// waits for a receive) or a moved acknowledgement line.
    pub(crate) fn input(&self, link: &Link) -> bool {
        if self.rx_blocked.load(Ordering::SeqCst) {
            return false;
        }
        link.inc.has_data()
            || link.out.acked().load(Ordering::SeqCst) > self.acked_seen.load(Ordering::Relaxed)
    }

    /// Drives from a thread that is not waiting on an EVD (a post that
    /// found its queue full, `close`): as a waiter would, so that the
    /// helper does not sleep on a doorbell this thread drains.
    pub(crate) fn drive_self(&self) -> bool {
        Driver::enter(self);
        let moved = self.drive_now();
        Driver::leave(self);
        moved
    }

    /// Before sleeping on the doorbell: asks the peer to ring it, then looks
    /// once more (at the ring and at the acknowledgement line, both of
    /// which the peer rings for). False when there is work after all (do
    /// not sleep). A message that waits for a receive is no work: its
    /// deadline ([`EpShared::rnr_deadline`]) or a posted receive ends it.
    pub(crate) fn arm(&self) -> bool {
        let Some(link) = self.link.get() else { return true };
        self.efd_armed.store(true, Ordering::SeqCst);
        link.inc.want_data().store(1, Ordering::SeqCst);
        !self.input(link)
    }

    /// When a message waiting for a receive times out.
    pub(crate) fn rnr_deadline(&self) -> Option<Instant> {
        self.rx.try_lock().ok()?.rnr_since.map(|t| t + self.ia.cfg.rnr_timeout)
    }

    /// The connection ended and nothing is left to send.
    pub(crate) fn finished(&self) -> bool {
        self.state() != EpState::Connected && self.tx().pending.is_empty()
    }
}

impl Driver for EpShared {
    fn drive(&self) -> bool {
        self.drive_now()
    }

    fn wait_on(&self) -> WaitOn<'_> {
        let Some(link) = self.link.get().filter(|_| self.state() == EpState::Connected) else {
            return WaitOn { fd: None, deadline: None };
        };
        if !self.arm() {
            return WaitOn { fd: None, deadline: Some(Instant::now()) };
        }
        WaitOn {
            fd: Some((link.my_efd.as_fd(), Interest { read: true, write: false })),
            deadline: self.rnr_deadline(),
        }
    }

    fn look_on(&self) -> WaitOn<'_> {
        WaitOn { fd: None, deadline: Some(Instant::now()) }
    }

    fn spin_looks(&self) -> u32 {
        SPIN_LOOKS
    }

    fn has_input(&self) -> bool {
        self.link.get().is_some_and(|l| self.input(l))
    }

    fn enter(&self) {
        self.drivers.fetch_add(WAIT_BEGUN + 1, Ordering::SeqCst);
        if self.handing.load(Ordering::Relaxed) {
            // Back before the helper took over: its next takeover is not
            // this leave's.
            self.handing.store(false, Ordering::SeqCst);
        }
        if self.helper_armed.load(Ordering::SeqCst)
            && self.helper_armed.swap(false, Ordering::SeqCst)
        {
            // Back to an EP the helper had taken over from a thread that
            // left a long wait: straight back (the thread polls in waits),
            // or after computing meanwhile?
            let (left, now) = (self.left_at.load(Ordering::SeqCst), now_ns());
            if left != u64::MAX {
                self.handover.returned(now.saturating_sub(left) < QUICK.as_nanos() as u64);
            } else if now.saturating_sub(self.taken_at.load(Ordering::SeqCst))
                >= QUICK.as_nanos() as u64
            {
                // Taken over unasked (when the thread left is not known),
                // and away a quick period since: it computed. (Sooner,
                // nothing is known: nothing is counted.) Without this an
                // endpoint whose quick looks ended would never get them
                // back: only a timed return could say it stayed away.
                self.handover.returned(false);
            }
            // The helper sleeps on the doorbell this thread may now drain:
            // it must watch instead.
            self.ia.helper.kick();
        }
    }

    fn leave(&self) {
        if self.drivers.fetch_sub(1, Ordering::SeqCst) as u32 == 1 && self.handover.leave() {
            // A long wait ends: the helper takes the EP over now (see
            // `Handover`), not at its next look.
            self.left_at.store(now_ns(), Ordering::SeqCst);
            self.handing.store(true, Ordering::SeqCst);
            self.ia.helper.kick();
            rmr_api::provider::yield_to_helper();
        }
    }

    fn release(&self) {
        // Unless a thread drives it, or the helper has it already.
        if self.drivers.load(Ordering::SeqCst) as u32 == 0
            && !self.helper_armed.load(Ordering::SeqCst)
        {
            self.ia.helper.kick();
        }
    }
}

impl Tended for EpShared {
    fn key(&self) -> u64 {
        self.id.0
    }

    fn doorbell(&self) -> BorrowedFd<'_> {
        self.link.get().expect("tended once connected").my_efd.as_fd()
    }

    fn socket(&self) -> BorrowedFd<'_> {
        self.link.get().expect("tended once connected").sock.as_fd()
    }

    fn look(&self) -> Look {
        if self.finished() {
            return Look::Gone;
        }
        let drivers = || {
            let now = self.drivers.load(Ordering::SeqCst);
            (now >> 32, now as u32 > 0)
        };
        let quick = match self.handover.look(drivers) {
            // Waits began since the last quick look: the threads are back.
            QuickLook::Soon => return Look::Soon,
            // One wait since the last look: its waiter kicks the helper as
            // it leaves.
            QuickLook::Hold => return Look::Watch,
            QuickLook::Off => false,
            QuickLook::Left => true,
        };
        // Dekker with `enter`, before anything is driven or armed: either a
        // thread that starts driving sees the flag (and kicks the helper),
        // or the helper sees it driving and stands back.
        self.helper_armed.store(true, Ordering::SeqCst);
        let now = self.drivers.load(Ordering::SeqCst);
        if now as u32 > 0 {
            // A thread came in just now, perhaps before it could see the
            // flag (then nobody kicks the helper): while quick looks last,
            // look again as one would, not only at the watch.
            self.helper_armed.store(false, Ordering::SeqCst);
            return if quick { Look::Soon } else { Look::Watch };
        }
        // Taken over from threads that compute between waits: look again
        // soon once they are back (counting waits from now). When a thread
        // that left a long wait told the helper, its return is timed from
        // that leave; else nobody knows when the last thread left.
        if self.handover.took_over(now >> 32) && !self.handing.swap(false, Ordering::SeqCst) {
            self.left_at.store(u64::MAX, Ordering::SeqCst);
            self.taken_at.store(now_ns(), Ordering::SeqCst);
        }
        let moved = self.drive_now();
        if moved || !self.arm() {
            self.helper_armed.store(false, Ordering::SeqCst);
            return Look::Again;
        }
        if self.rnr_deadline().is_some() || !self.tx().pending.is_empty() {
            // A message waits for a receive, or frames for ring space: look
            // again, soon while the quick looks last (a receive posted by a
            // thread that then computes takes the message in, and the
            // helper must be back on the doorbell for what follows).
            self.helper_armed.store(false, Ordering::SeqCst);
            return if self.handover.spend() { Look::Soon } else { Look::Retry };
        }
        Look::Armed
    }

    fn hung_up(&self) {
        self.peer_gone();
    }
}

/// The peer of a set-up socket: it must run as this process's user (the
/// trust boundary); its pid as the kernel sees it, when that is the one it
/// claims (else cross-memory attach is not used, and why).
pub(crate) fn peer_identity(
    sock: &OwnedFd,
    claimed: i32,
) -> Result<std::result::Result<i32, String>> {
    let cred = rustix::net::sockopt::socket_peercred(sock)
        .map_err(|e| Error::io("SO_PEERCRED", e.into()))?;
    if cred.uid != rustix::process::getuid() {
        return Err(Error::Protocol(format!(
            "the shm peer runs as user {}, not as this process's user",
            cred.uid.as_raw()
        )));
    }
    let pid = cred.pid.as_raw_nonzero().get();
    Ok(if pid == claimed {
        Ok(pid)
    } else {
        Err(format!(
            "the peer's pid is not visible here (it says {claimed}, the kernel {pid}): another pid namespace"
        ))
    })
}
