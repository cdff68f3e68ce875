//! Connecting in the background ([`rmr_api::Ep::connect_start`]): a
//! [`Dialer`] carries one connection's non-blocking connect and handshake
//! on the IA's progress engine (no thread per pending connection), then
//! starts the EP, or posts why it could not.

use crate::engine::{Next, Tended, Watched};
use crate::ep::connect::tune;
use crate::ep::shared::*;
use crate::wire::{self, HDR, Header, Op};
use rmr_api::{EpState, Error, Event, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One connection being set up.
pub(super) struct Dialer {
    ep: Arc<EpShared>,
    stream: TcpStream,
    until: Instant,
    st: Mutex<Dial>,
    slot: AtomicUsize,
    kick: AtomicBool,
}

/// How far the handshake got.
struct Dial {
    /// The request frame, and how much of it went.
    out: Vec<u8>,
    sent: usize,
    /// The answer so far, and its whole length once its header is in.
    inb: Vec<u8>,
    need: usize,
    done: bool,
}

impl Dialer {
    /// Opens the socket and starts its connect; the engine carries the rest.
    pub(super) fn start(
        ep: &Arc<EpShared>,
        remote: &str,
        service: u16,
        pd: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        let ip = crate::ep::connect::dial_target(remote, pd)?;
        if !ep.cas_state(EpState::Unconnected, EpState::Pending) {
            return Err(Error::invalid("endpoint is not in the unconnected state"));
        }
        ep.abandoned.store(false, Ordering::Release);
        let to = SocketAddr::new(ip, service);
        let sock = (|| {
            let s = socket2::Socket::new(
                socket2::Domain::for_address(to),
                socket2::Type::STREAM,
                Some(socket2::Protocol::TCP),
            )?;
            s.bind(&SocketAddr::new(ep.ia.ip, 0).into())?;
            s.set_nonblocking(true)?;
            match s.connect(&to.into()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                Err(e) => return Err(e),
            }
            Ok(s)
        })();
        let sock = match sock {
            Ok(s) => s,
            Err(e) => {
                ep.set_state(EpState::Unconnected);
                return Err(Error::io(format!("connect {to}"), e));
            }
        };
        let mut h = Header::new(Op::ConnReq);
        h.len = pd.len() as u32;
        h.arg0 = wire::MAGIC;
        let mut out = h.encode().to_vec();
        out.extend_from_slice(pd);
        let d = Arc::new(Dialer {
            ep: ep.clone(),
            stream: sock.into(),
            until: Instant::now() + timeout,
            st: Mutex::new(Dial { out, sent: 0, inb: Vec::new(), need: HDR, done: false }),
            slot: AtomicUsize::new(crate::engine::NO_SLOT),
            kick: AtomicBool::new(false),
        });
        if let Err(e) = ep.ia.engine.register(d) {
            ep.set_state(EpState::Unconnected);
            return Err(Error::io("start the IA's progress helper", e));
        }
        Ok(())
    }

    /// The attempt failed: the EP may connect again, its connection EVD
    /// says why.
    fn fail(&self, why: String) -> Next {
        tracing::debug!(target: "rmr::tcp", ep = self.ep.id.0, reason = %why, "background connect failed");
        self.ep.set_state(EpState::Unconnected);
        self.ep.push_conn(Event::Broken { ep: self.ep.id, reason: why });
        Next::Gone
    }

    /// One step of the handshake, as far as the socket allows.
    fn step(&self, d: &mut Dial) -> Next {
        if let Ok(Some(e)) | Err(e) = self.stream.take_error() {
            return self.fail(format!("connect: {e}"));
        }
        if Instant::now() >= self.until {
            return self.fail("connect: timed out".into());
        }
        while d.sent < d.out.len() {
            match (&self.stream).write(&d.out[d.sent..]) {
                Ok(n) => d.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Next::Arm {
                        read: false,
                        write: true,
                        errors: false,
                        deadline: Some(self.until),
                    };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Not connected yet (a connect still in progress reads as
                // such on some kernels): wait for writability.
                Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
                    return Next::Arm {
                        read: false,
                        write: true,
                        errors: false,
                        deadline: Some(self.until),
                    };
                }
                Err(e) => return self.fail(format!("send request: {e}")),
            }
        }
        while d.inb.len() < d.need {
            let have = d.inb.len();
            d.inb.resize(d.need, 0);
            match (&self.stream).read(&mut d.inb[have..]) {
                Ok(0) => {
                    d.inb.truncate(have);
                    return self.fail("connect: the peer closed the connection".into());
                }
                Ok(n) => d.inb.truncate(have + n),
                Err(e) => {
                    d.inb.truncate(have);
                    match e.kind() {
                        std::io::ErrorKind::WouldBlock => {
                            return Next::Arm {
                                read: true,
                                write: false,
                                errors: false,
                                deadline: Some(self.until),
                            };
                        }
                        std::io::ErrorKind::Interrupted => continue,
                        _ => return self.fail(format!("connection handshake: {e}")),
                    }
                }
            }
            if d.inb.len() == HDR && d.need == HDR {
                let h = Header::decode(d.inb[..HDR].try_into().expect("a header"));
                match h.validate() {
                    Ok(Op::ConnAccept | Op::ConnReject) if h.len as usize <= wire::MAX_PRIVATE => {
                        d.need = HDR + h.len as usize;
                    }
                    Ok(op) => return self.fail(format!("unexpected {op:?} in handshake")),
                    Err(e) => return self.fail(format!("connection handshake: {e}")),
                }
            }
        }
        d.done = true;
        let op = Header::decode(d.inb[..HDR].try_into().expect("a header")).validate();
        let peer_pd = d.inb[HDR..].to_vec();
        if op == Ok(Op::ConnReject) {
            self.ep.set_state(EpState::Unconnected);
            self.ep.push_conn(Event::Rejected { ep: self.ep.id, private_data: peer_pd });
            return Next::Gone;
        }
        // The handle went while the answer came (perhaps within this very
        // step): no endpoint for it.
        if self.ep.abandoned.load(Ordering::Acquire) {
            self.ep.set_state(EpState::Unconnected);
            return Next::Gone;
        }
        // The EP takes its own handle on the socket (this one leaves the
        // engine's set with the dialer).
        let started = self.stream.try_clone().map_err(|e| Error::io("socket", e)).and_then(|s| {
            tune(&s, &self.ep.ia.cfg).map_err(|e| Error::io("socket options", e))?;
            self.ep.start(s, peer_pd)
        });
        match started {
            Ok(()) => {
                // The handle went while this started the endpoint: end it.
                if self.ep.abandoned.load(Ordering::Acquire) {
                    let _ = self.ep.disconnect();
                }
                Next::Gone
            }
            Err(e) => self.fail(format!("start: {e}")),
        }
    }
}

impl Tended for Dialer {
    fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    fn slot(&self) -> &AtomicUsize {
        &self.slot
    }

    fn kick_pending(&self) -> &AtomicBool {
        &self.kick
    }

    fn tend(&self) -> Next {
        let mut d = self.st.lock().unwrap_or_else(|e| e.into_inner());
        if d.done {
            return Next::Gone;
        }
        if self.ep.abandoned.load(Ordering::Acquire) {
            // Nobody holds the endpoint any more: no connection for it.
            d.done = true;
            self.ep.set_state(EpState::Unconnected);
            return Next::Gone;
        }
        let next = self.step(&mut d);
        if matches!(next, Next::Gone) {
            d.done = true;
        }
        next
    }

    fn look(&self, _seen: &mut u64, _same: &mut u32) -> Watched {
        Watched::Tend
    }
}
