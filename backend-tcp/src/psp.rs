//! Public service points: a listening socket whose accepted connections
//! become connection-request events.

use crate::domain::IaShared;
use crate::ep::{TcpEp, handshake_write, push, tune};
use crate::wire::{HDR, Header, Op};
use rmr_api::{ConnRequest, ConnRequestOps, Ep, EpState, Error, Evd, Event, Psp, Result};
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connection requests waiting for accept/reject, per PSP; beyond this a
/// flood of connectors is refused (closed) instead of eating memory.
const MAX_PENDING: usize = 1024;
/// How long the listener waits after a failed accept (EMFILE, ENOBUFS...).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

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
        let listener = Arc::new(listener);
        let closed = Arc::new(AtomicBool::new(false));
        let pending = Arc::new(AtomicUsize::new(0));
        let (l, c) = (listener.clone(), closed.clone());
        std::thread::Builder::new()
            .name(format!("rmr-tcp-psp{}", addr.port()))
            .spawn(move || {
                for conn in l.incoming() {
                    if c.load(Ordering::Acquire) {
                        break;
                    }
                    let stream = match conn {
                        Ok(s) => s,
                        // Out of descriptors or buffers: accept fails at once for
                        // as long as it lasts; back off instead of spinning a core.
                        Err(e) if e.kind() != std::io::ErrorKind::ConnectionAborted => {
                            std::thread::sleep(ACCEPT_BACKOFF);
                            continue;
                        }
                        Err(_) => continue,
                    };
                    if pending.load(Ordering::Acquire) >= MAX_PENDING {
                        continue; // dropped: the connector sees the connection closed
                    }
                    pending.fetch_add(1, Ordering::AcqRel);
                    let (ia, evd, pending) = (ia.clone(), evd.clone(), pending.clone());
                    let spawned = std::thread::Builder::new()
                        .name("rmr-tcp-handshake".into())
                        .stack_size(128 << 10)
                        .spawn(move || {
                            if !handshake(stream, ia, &evd, pending.clone()) {
                                pending.fetch_sub(1, Ordering::AcqRel);
                            }
                        });
                    if spawned.is_err() {
                        // Out of threads: the stream was dropped with the closure.
                    }
                }
            })
            .map_err(|e| Error::io("spawn listener", e))?;
        Ok(TcpPsp { addr, listener, closed })
    }
}

/// Reads the connection request; on success posts the event and returns true.
fn handshake(
    mut stream: TcpStream,
    ia: Arc<IaShared>,
    evd: &Arc<dyn Evd>,
    pending: Arc<AtomicUsize>,
) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut hb = [0u8; HDR];
    if stream.read_exact(&mut hb).is_err() {
        return false;
    }
    let h = Header::decode(&hb);
    if h.validate() != Ok(Op::ConnReq) {
        return false; // not one of ours: close silently
    }
    let mut pd = vec![0u8; h.len as usize];
    if stream.read_exact(&mut pd).is_err() || stream.set_read_timeout(None).is_err() {
        return false;
    }
    let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let req = TcpConnReq { stream: Mutex::new(Some(stream)), pd, peer, ia, pending };
    push(evd, Event::ConnectionRequest(ConnRequest(Arc::new(req))));
    true
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
        tune(&s, self.ia.cfg.user_timeout).map_err(|e| Error::io("socket options", e))?;
        handshake_write(&mut s, Op::ConnAccept, pd)
            .map_err(|e| Error::Broken(format!("connector went away: {e}")))?;
        tep.sh.start(s, self.pd.clone())
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
