//! Public service points: a listening socket whose accepted connections
//! become connection-request events, all read by one listener thread per
//! PSP (however many connect at once).

use crate::domain::IaShared;
use crate::ep::{TcpEp, handshake_write, push, tune};
use crate::wire::{HDR, Header, Op};
use rmr_api::{ConnRequest, ConnRequestOps, Ep, EpState, Error, Evd, Event, Psp, Result};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connection requests waiting for accept/reject, per PSP; beyond this a
/// flood of connectors is refused (closed) instead of eating memory.
const MAX_PENDING: usize = 1024;
/// How long the listener waits after a failed accept (EMFILE, ENOBUFS...).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// How long a connector has to send its whole request.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(5);

/// A listening service point of the TCP backend.
pub struct TcpPsp {
    addr: SocketAddr,
    listener: Arc<TcpListener>,
    closed: Arc<AtomicBool>,
}

impl TcpPsp {
    pub(crate) fn listen(ia: Arc<IaShared>, service: u16, evd: Arc<dyn Evd>) -> Result<TcpPsp> {
        let want = SocketAddr::new(ia.ip, service);
        let listener =
            TcpListener::bind(want).map_err(|e| Error::io(format!("listen on {want}"), e))?;
        let addr = listener.local_addr().map_err(|e| Error::io("local_addr", e))?;
        listener.set_nonblocking(true).map_err(|e| Error::io("set non-blocking", e))?;
        let listener = Arc::new(listener);
        let closed = Arc::new(AtomicBool::new(false));
        let (l, c) = (listener.clone(), closed.clone());
        std::thread::Builder::new()
            .name(format!("rmr-tcp-psp{}", addr.port()))
            .spawn(move || {
                Listener {
                    l,
                    closed: c,
                    ia,
                    evd,
                    pending: Arc::default(),
                    told_version: AtomicBool::new(false),
                }
                .run()
            })
            .map_err(|e| Error::io("spawn listener", e))?;
        Ok(TcpPsp { addr, listener, closed })
    }
}

/// A connection whose request is still arriving.
struct Handshake {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes the request has in all (header first, then its length).
    need: usize,
    until: Instant,
}

/// The listener thread: accepts, and reads every pending connection's
/// request as it arrives, all in one `poll(2)` loop (no thread per
/// pending connection; a slow or silent connector holds a buffer, not a
/// thread, until [`HANDSHAKE_WAIT`]).
struct Listener {
    l: Arc<TcpListener>,
    closed: Arc<AtomicBool>,
    ia: Arc<IaShared>,
    evd: Arc<dyn Evd>,
    /// Requests posted and not yet answered.
    pending: Arc<AtomicUsize>,
    /// A request in another protocol version was logged at warning level.
    told_version: AtomicBool,
}

impl Listener {
    fn run(self) {
        let mut hs: Vec<Handshake> = Vec::new();
        let mut backoff: Option<Instant> = None;
        while !self.closed.load(Ordering::Acquire) {
            let now = Instant::now();
            let listening = backoff.is_none_or(|b| now >= b);
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(hs.len() + 1);
            fds.push(PollFd::new(
                &*self.l,
                if listening { PollFlags::IN } else { PollFlags::empty() },
            ));
            fds.extend(hs.iter().map(|h| PollFd::new(&h.stream, PollFlags::IN)));
            let until = hs.iter().map(|h| h.until).chain(backoff).min();
            let ts = until.map(|u| {
                let t = u.saturating_duration_since(now);
                Timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ }
            });
            let _ = poll(&mut fds, ts.as_ref());
            let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            // Requests that arrived (or failed), newest last; a removal
            // from the back keeps the indices before it.
            for i in (0..hs.len()).rev() {
                if ready[i + 1] && self.read_some(&mut hs[i]) {
                    let h = hs.swap_remove(i);
                    if h.buf.len() == h.need {
                        self.post(h);
                    }
                }
            }
            let now = Instant::now();
            hs.retain(|h| h.until > now);
            backoff = backoff.filter(|b| *b > now);
            if ready[0] && listening {
                loop {
                    match self.l.accept() {
                        Ok((stream, _)) => {
                            if hs.len() + self.pending.load(Ordering::Acquire) >= MAX_PENDING
                                || stream.set_nonblocking(true).is_err()
                            {
                                continue; // dropped: the connector sees the connection closed
                            }
                            hs.push(Handshake {
                                stream,
                                buf: Vec::new(),
                                need: HDR,
                                until: now + HANDSHAKE_WAIT,
                            });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
                        // Out of descriptors or buffers: accept fails at once for
                        // as long as it lasts; back off instead of spinning a core.
                        Err(_) => {
                            backoff = Some(now + ACCEPT_BACKOFF);
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Reads what arrived of `h`'s request; true when it is complete or
    /// the connection is to be dropped (closed, or not one of ours).
    fn read_some(&self, h: &mut Handshake) -> bool {
        loop {
            let have = h.buf.len();
            h.buf.resize(h.need, 0);
            match (&h.stream).read(&mut h.buf[have..]) {
                Ok(0) => {
                    h.buf.truncate(have);
                    return true; // closed before its request: dropped
                }
                Ok(n) => h.buf.truncate(have + n),
                Err(e) => {
                    h.buf.truncate(have);
                    return e.kind() != std::io::ErrorKind::WouldBlock
                        && e.kind() != std::io::ErrorKind::Interrupted;
                }
            }
            if h.buf.len() == HDR && h.need == HDR {
                let hdr = Header::decode(h.buf[..HDR].try_into().expect("a header"));
                let valid = hdr.validate();
                if let Err(e @ crate::wire::WireError::Version(_)) = &valid {
                    // Another build of rmr: worth a word, unlike noise (once
                    // per service point at warning level: a flood of them
                    // does not flood the log).
                    let peer = h.stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                    if self.told_version.swap(true, Ordering::Relaxed) {
                        tracing::debug!(target: "rmr::tcp", %peer, "refused: {e}");
                    } else {
                        tracing::warn!(target: "rmr::tcp", %peer, "refused: {e}");
                    }
                    // The other side learns why too: a rejection (whose
                    // header every version reads) with the reason as its
                    // private data. Best effort: one write into an empty
                    // socket buffer.
                    let why = e.to_string();
                    let mut r = Header::new(Op::ConnReject);
                    r.len = why.len() as u32;
                    let _ = (&h.stream).write(&[r.encode().as_slice(), why.as_bytes()].concat());
                    // What the request sent after its header is read, so
                    // that the close is a FIN, not a reset (on which a
                    // peer's stack may drop what it has not read yet).
                    let mut rest = [0u8; 1024];
                    let _ = (&h.stream).read(&mut rest);
                }
                if valid != Ok(Op::ConnReq) || hdr.len as usize > crate::wire::MAX_PRIVATE {
                    h.need = usize::MAX; // not one of ours: closed (silently, but for a version)
                    return true;
                }
                h.need = HDR + hdr.len as usize;
            }
            if h.buf.len() == h.need {
                return true;
            }
        }
    }

    /// Posts a complete request as a connection-request event.
    fn post(&self, h: Handshake) {
        if h.stream.set_nonblocking(false).is_err() {
            return;
        }
        let pd = h.buf[HDR..].to_vec();
        let peer = h.stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        self.pending.fetch_add(1, Ordering::AcqRel);
        let req = TcpConnReq {
            stream: Mutex::new(Some(h.stream)),
            pd,
            peer,
            ia: self.ia.clone(),
            pending: self.pending.clone(),
        };
        push(&self.evd, Event::ConnectionRequest(ConnRequest(Arc::new(req))));
    }
}

struct TcpConnReq {
    stream: Mutex<Option<TcpStream>>,
    pd: Vec<u8>,
    peer: String,
    ia: Arc<IaShared>,
    pending: Arc<AtomicUsize>,
}

impl TcpConnReq {
    fn take(&self) -> Result<TcpStream> {
        let s = self.stream.lock().unwrap_or_else(|e| e.into_inner()).take();
        match s {
            Some(s) => {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                Ok(s)
            }
            None => Err(Error::invalid("connection request already answered")),
        }
    }
}

impl Drop for TcpConnReq {
    fn drop(&mut self) {
        if self.stream.get_mut().map(|s| s.is_some()).unwrap_or(false) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl ConnRequestOps for TcpConnReq {
    fn accept(&self, ep: &Arc<dyn Ep>, pd: &[u8]) -> Result<()> {
        let _span =
            tracing::debug_span!(target: "rmr::tcp", "accept", ep = ep.id().0, peer = %self.peer)
                .entered();
        let tep = ep
            .as_any()
            .downcast_ref::<TcpEp>()
            .ok_or_else(|| Error::invalid("EP of another provider"))?;
        if !Arc::ptr_eq(&tep.sh.ia, &self.ia) {
            return Err(Error::invalid("EP of another IA than the PSP's"));
        }
        if tep.sh.state() != EpState::Unconnected {
            return Err(Error::invalid("EP is not unconnected"));
        }
        if pd.len() > crate::wire::MAX_PRIVATE {
            return Err(Error::invalid("private data too long"));
        }
        let mut s = self.take()?;
        tune(&s, &self.ia.cfg).map_err(|e| Error::io("socket options", e))?;
        handshake_write(&mut s, Op::ConnAccept, pd)
            .map_err(|e| Error::Broken(format!("connector went away: {e}")))?;
        tep.sh.start(s, self.pd.clone())?;
        tracing::debug!(target: "rmr::tcp", "accepted");
        Ok(())
    }

    fn reject(&self, pd: &[u8]) -> Result<()> {
        let mut s = self.take()?;
        handshake_write(&mut s, Op::ConnReject, &pd[..pd.len().min(crate::wire::MAX_PRIVATE)])
            .map_err(|e| Error::Broken(format!("connector went away: {e}")))
    }

    fn private_data(&self) -> &[u8] {
        &self.pd
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

impl Psp for TcpPsp {
    fn service(&self) -> u16 {
        self.addr.port()
    }

    fn address(&self) -> String {
        self.addr.ip().to_string()
    }

    fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            // Wakes the accept loop: accept() fails once the socket is shut down.
            let _ = socket2::SockRef::from(&*self.listener).shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for TcpPsp {
    fn drop(&mut self) {
        self.close();
    }
}
