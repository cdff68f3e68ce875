//! Connection set-up: the socket options every stream gets, the
//! handshake frames that carry private data, dialing a peer, and starting
//! a connected EP (its reader state and sender, handed to the IA's
//! progress engine).

use crate::ep::rx::RxState;
use crate::ep::shared::*;
use crate::tx::Tx;
use crate::wire::{self, HDR, Header, Op};
use crate::zerocopy::Zc;
use rmr_api::provider::Driver;
use rmr_api::{EpState, Error, Event, Result};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Socket options every EP stream gets: no Nagle, a bounded time to detect a
/// dead peer or a cut link.
pub(crate) fn tune(stream: &TcpStream, cfg: &crate::TcpConfig) -> std::io::Result<()> {
    let user_timeout = cfg.user_timeout;
    stream.set_nodelay(true)?;
    let s = socket2::SockRef::from(stream);
    let idle = (user_timeout / 2).max(Duration::from_secs(1));
    let ka = socket2::TcpKeepalive::new()
        .with_time(idle)
        .with_interval(Duration::from_secs(1))
        .with_retries(3);
    s.set_tcp_keepalive(&ka)?;
    s.set_tcp_user_timeout(Some(user_timeout))?;
    if let Some(sz) = cfg.sockbuf {
        s.set_send_buffer_size(sz)?;
        s.set_recv_buffer_size(sz)?;
    }
    Ok(())
}

/// Sets the send buffer of a connection to a near peer
/// ([`crate::TcpConfig::near_sndbuf`], [`crate::TcpConfig::near`]; not
/// when `sockbuf` is given). Returns what the buffer is, and why, for the
/// EP's notes.
fn size_send_buffer(stream: &TcpStream, peer: IpAddr, cfg: &crate::TcpConfig) -> String {
    if let Some(sz) = cfg.sockbuf {
        return format!("{sz} asked (sockbuf)");
    }
    if cfg.near_sndbuf == 0 || cfg.near == crate::Near::Off {
        return "kernel autotuning (near off)".into();
    }
    let why = if on_this_host(peer) {
        "near: the peer is on this host".to_string()
    } else if cfg.near == crate::Near::Host {
        return "kernel autotuning (the peer is on another host)".into();
    } else {
        match rmr_api::provider::io::tcp_rtt(std::os::fd::AsFd::as_fd(stream)) {
            // No sample (a retransmitted handshake without timestamps):
            // nothing says the peer is near.
            Ok(rtt) if rtt.is_zero() => {
                return "kernel autotuning (round trip not measured)".into();
            }
            Ok(rtt) if rtt > crate::NEAR_RTT => {
                return format!("kernel autotuning (round trip {} us at connect)", rtt.as_micros());
            }
            Ok(rtt) => format!("near: round trip {} us at connect", rtt.as_micros()),
            Err(e) => return format!("kernel autotuning (round trip unknown: {e})"),
        }
    };
    let s = socket2::SockRef::from(stream);
    match s.set_send_buffer_size(cfg.near_sndbuf) {
        // What the socket got: the kernel doubles the size asked for and
        // caps it at net.core.wmem_max.
        Ok(()) => match s.send_buffer_size() {
            Ok(got) => format!("{got} ({} asked; {why})", cfg.near_sndbuf),
            Err(_) => format!("{} asked ({why})", cfg.near_sndbuf),
        },
        Err(e) => format!("kernel autotuning (setting {}: {e})", cfg.near_sndbuf),
    }
}

/// Whether `ip` is this host's (in this network namespace): a loopback
/// address, or one a socket can bind to here.
fn on_this_host(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

pub(super) fn handshake_read(stream: &mut TcpStream) -> Result<(Op, Vec<u8>)> {
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

/// The address a connect dials, once its private data is checked.
pub(super) fn dial_target(remote: &str, pd: &[u8]) -> Result<IpAddr> {
    if pd.len() > wire::MAX_PRIVATE {
        return Err(Error::invalid(format!("private data over {} bytes", wire::MAX_PRIVATE)));
    }
    remote
        .parse()
        .map_err(|_| Error::BadSpec { spec: remote.into(), why: "expected an IP address".into() })
}

impl EpShared {
    /// Zero-copy sends for `stream` when configured and the kernel takes
    /// them; the EP's `zerocopy` note says otherwise why not.
    fn zerocopy(&self, stream: &TcpStream) -> Option<Zc> {
        let Some(min) = self.ia.cfg.zerocopy else {
            let _ = self.zc_off.set("off".into());
            return None;
        };
        match rmr_api::provider::io::enable_zerocopy(stream.as_fd()) {
            Ok(()) => Some(Zc::new(min)),
            Err(e) => {
                let _ = self.zc_off.set(format!("refused by the kernel: {e}"));
                None
            }
        }
    }

    /// Makes the connection live: the stream goes non-blocking, the EP
    /// registers as a driver with its EVDs and with the IA's progress
    /// engine, and Established is posted.
    pub(crate) fn start(self: &Arc<Self>, stream: TcpStream, peer_pd: Vec<u8>) -> Result<()> {
        let peer = stream.peer_addr().map_err(|e| Error::io("peer_addr", e))?;
        let _ = self.sndbuf.set(size_send_buffer(&stream, peer.ip(), &self.ia.cfg));
        stream.set_nonblocking(true).map_err(|e| Error::io("set non-blocking", e))?;
        let _ = self.peer.set(peer);
        let zc = self.zerocopy(&stream);
        if self.tx.set(Tx::new(stream, zc)).is_err() {
            return Err(Error::invalid("endpoint already connected"));
        }
        *self.rx.lock().unwrap_or_else(|e| e.into_inner()) = Some(RxState::new());
        self.set_state(EpState::Connected);
        let me: Arc<dyn Driver> = self.clone();
        for evd in self.distinct_evds() {
            evd.add_driver(&me);
        }
        if let Err(e) = self.ia.engine.register(self.clone()) {
            self.detach();
            self.set_state(EpState::Broken);
            return Err(Error::io("start the IA's progress helper", e));
        }
        self.push_conn(Event::Established { ep: self.id, private_data: peer_pd });
        Ok(())
    }
}

impl TcpEp {
    /// [`Ep::connect`]: dials the peer, exchanges the handshake and starts the EP.
    pub(super) fn connect_stream(
        &self,
        remote: &str,
        service: u16,
        pd: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let _span =
            tracing::debug_span!(target: "rmr::tcp", "connect", ep = self.sh.id.0, remote, service)
                .entered();
        let ip = dial_target(remote, pd)?;
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
            tune(&stream, &self.sh.ia.cfg).map_err(|e| Error::io("socket options", e))?;
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
                tracing::debug!(target: "rmr::tcp", "connected");
                Ok(peer_pd)
            }
            Err(e) => {
                tracing::debug!(target: "rmr::tcp", error = %e, "connect failed");
                self.sh.set_state(EpState::Unconnected);
                Err(e)
            }
        }
    }
}
