//! [`ShmPsp`], a service point: a Unix-domain `SOCK_SEQPACKET` socket in
//! the abstract namespace (`rmr-shm/<uid>/<name>/<service>`) and a thread
//! that turns each connecting peer's set-up message into a
//! `ConnectionRequest` event. The socket carries set-up only.

use crate::domain::IaShared;
use crate::ep::{EpShared, Kind, Msg, ShmEp, recv_msg, send_msg, socket_name};
use rmr_api::provider::SoftEvd;
use rmr_api::{ConnRequest, ConnRequestOps, Ep, Error, Evd, Event, Psp, Result};
use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a connecting peer has to send its set-up message.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// A service point of the shm backend.
pub struct ShmPsp {
    service: u16,
    name: String,
    wake: Arc<OwnedFd>,
    closed: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ShmPsp {
    pub(crate) fn listen(ia: Arc<IaShared>, service: u16, evd: Arc<dyn Evd>) -> Result<ShmPsp> {
        let sock = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Error::io("socket", e.into()))?;
        let service = bind(&sock, &ia.name, service)?;
        rustix::net::listen(&sock, 128).map_err(|e| Error::io("listen", e.into()))?;
        let wake = Arc::new(
            eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
                .map_err(|e| Error::io("eventfd", e.into()))?,
        );
        let closed = Arc::new(AtomicBool::new(false));
        let (w, c, name) = (wake.clone(), closed.clone(), ia.name.clone());
        let thread = std::thread::Builder::new()
            .name(format!("rmr-shm-psp-{service}"))
            .spawn(move || serve(ia, sock, evd, &w, &c))
            .map_err(|e| Error::io("spawn the service point's thread", e))?;
        Ok(ShmPsp { service, name, wake, closed, thread: Mutex::new(Some(thread)) })
    }
}

/// Binds `service` (0: a free one) in namespace `name`.
fn bind(sock: &OwnedFd, name: &str, service: u16) -> Result<u16> {
    let try_bind = |s: u16| {
        let addr = rustix::net::SocketAddrUnix::new_abstract_name(&socket_name(name, s))?;
        rustix::net::bind(sock, &addr)
    };
    if service != 0 {
        try_bind(service)
            .map_err(|e| Error::io(format!("bind shm service {name}/{service}"), e.into()))?;
        return Ok(service);
    }
    for _ in 0..1000 {
        let s = (getrandom::u32().unwrap_or(4242) % 60_000 + 1024) as u16;
        match try_bind(s) {
            Ok(()) => return Ok(s),
            Err(rustix::io::Errno::ADDRINUSE) => continue,
            Err(e) => return Err(Error::io(format!("bind shm service {name}/{s}"), e.into())),
        }
    }
    Err(Error::invalid("no free shm service id found"))
}

fn serve(ia: Arc<IaShared>, sock: OwnedFd, evd: Arc<dyn Evd>, wake: &OwnedFd, closed: &AtomicBool) {
    while !closed.load(Ordering::Acquire) {
        let mut fds = [PollFd::new(&sock, PollFlags::IN), PollFd::new(wake, PollFlags::IN)];
        if rustix::event::poll(&mut fds, None).is_err() {
            continue;
        }
        if closed.load(Ordering::Acquire) {
            break;
        }
        if !fds[0].revents().contains(PollFlags::IN) {
            continue;
        }
        let Ok(conn) = rustix::net::accept_with(&sock, rustix::net::SocketFlags::CLOEXEC) else {
            continue;
        };
        // Only this user's processes: another user's is dropped unheard.
        match rustix::net::sockopt::socket_peercred(&conn) {
            Ok(c) if c.uid == rustix::process::getuid() => {}
            _ => {
                tracing::debug!(target: "rmr::shm", "a process of another user connected; dropped");
                continue;
            }
        }
        match recv_msg(conn.as_fd(), HELLO_WAIT) {
            Ok(Some((m, fds))) if m.kind == Kind::Hello => {
                let peer = format!("pid {}", m.pid);
                let pd = m.pd.clone();
                let req =
                    ShmConnReq { ia: ia.clone(), conn: Mutex::new(Some((conn, m, fds))), pd, peer };
                if let Some(s) = evd.as_any().downcast_ref::<SoftEvd>() {
                    s.push(Event::ConnectionRequest(ConnRequest(Arc::new(req))));
                }
            }
            Ok(_) | Err(_) => {
                tracing::debug!(target: "rmr::shm", "a connecting peer sent no valid set-up message");
            }
        }
    }
}

impl Psp for ShmPsp {
    fn service(&self) -> u16 {
        self.service
    }

    fn address(&self) -> String {
        self.name.clone()
    }

    /// Stops listening: the service id is free again when this returns.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

impl Drop for ShmPsp {
    fn drop(&mut self) {
        self.close();
    }
}

/// A peer's request to connect, until accepted or rejected.
struct ShmConnReq {
    ia: Arc<IaShared>,
    conn: Mutex<Option<(OwnedFd, Msg, Vec<OwnedFd>)>>,
    pd: Vec<u8>,
    peer: String,
}

impl ConnRequestOps for ShmConnReq {
    fn accept(&self, ep: &Arc<dyn Ep>, private_data: &[u8]) -> Result<()> {
        let e = ep
            .as_any()
            .downcast_ref::<ShmEp>()
            .ok_or_else(|| Error::invalid("an EP of another provider"))?;
        if !Arc::ptr_eq(&e.sh.ia, &self.ia) {
            return Err(Error::invalid("an EP of another IA"));
        }
        let (sock, hello, fds) = self
            .conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::invalid("connection request already answered"))?;
        let sh: &Arc<EpShared> = &e.sh;
        sh.accept_from(sock, hello, fds, private_data)
    }

    fn reject(&self, private_data: &[u8]) -> Result<()> {
        let (sock, _, _) = self
            .conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::invalid("connection request already answered"))?;
        let m =
            Msg { kind: Kind::Reject, pid: 0, pz: 0, ring: 0, probe: 0, pd: private_data.to_vec() };
        send_msg(sock.as_fd(), &m, &[]).map_err(|e| Error::io("send the rejection", e))
    }

    fn private_data(&self) -> &[u8] {
        &self.pd
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}
