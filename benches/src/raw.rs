//! The physical baseline: plain TCP streams on the same links, with the
//! same sample shape as the rmr tests (20 × size bytes then an 8-byte reply;
//! a ping-pong of `size` bytes), one stream per rail in parallel.
//!
//! The latency floor busy-polls: both ends spin on a non-blocking socket
//! (`TCP_NODELAY`, no `poll` and no `read` that sleeps), as an rmr waiter
//! spins, so a ratio against it measures rmr, not a thread wake-up. The
//! blocking ping-pong (both ends sleep in `read`) stays as a second,
//! labelled row: what a wake-up costs on this host.

use crate::session::WRITES_PER_SAMPLE;
use crate::stats::{Summary, summarize};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const BW: u64 = 1;
/// Ping-pong, both ends blocking in `read`.
const LAT: u64 = 2;
/// Ping-pong, both ends busy-polling a non-blocking socket.
const LAT_SPIN: u64 = 3;

/// Reads exactly `buf.len()` bytes from a non-blocking socket, spinning on
/// `WouldBlock`.
fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` to a non-blocking socket, spinning on `WouldBlock`.
fn spin_write(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.write(&buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Serves raw-TCP clients on `addr:port` until `stop` is set.
pub(crate) fn serve(addr: IpAddr, port: u16, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    let l = TcpListener::bind(SocketAddr::new(addr, port))?;
    l.set_nonblocking(true)?;
    while !stop.load(Ordering::Acquire) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                std::thread::spawn(move || {
                    let _ = handle(s);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn handle(mut s: TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    let mode = u64::from_le_bytes(h[0..8].try_into().expect("8"));
    let size = u64::from_le_bytes(h[8..16].try_into().expect("8")).min(1 << 30) as usize;
    let mut buf = vec![0u8; size.max(8)];
    loop {
        match mode {
            BW => {
                let mut left = size as u64 * WRITES_PER_SAMPLE;
                while left > 0 {
                    let n = (left as usize).min(buf.len());
                    let got = s.read(&mut buf[..n])?;
                    if got == 0 {
                        return Ok(());
                    }
                    left -= got as u64;
                }
                s.write_all(&[1u8; 8])?;
            }
            LAT_SPIN => {
                s.set_nonblocking(true)?;
                loop {
                    if spin_read(&mut s, &mut buf[..size]).is_err() {
                        return Ok(());
                    }
                    spin_write(&mut s, &buf[..size])?;
                }
            }
            _ => {
                if s.read_exact(&mut buf[..size]).is_err() {
                    return Ok(());
                }
                s.write_all(&buf[..size])?;
            }
        }
    }
}

fn connect(peer: IpAddr, port: u16, mode: u64, size: u64) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::new(peer, port), Duration::from_secs(10))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut h = [0u8; 16];
    h[0..8].copy_from_slice(&mode.to_le_bytes());
    h[8..16].copy_from_slice(&size.to_le_bytes());
    s.write_all(&h)?;
    Ok(s)
}

/// Aggregate bandwidth (Mbit/s) of one stream per peer, run in parallel:
/// per sample each stream sends 20 × `size` bytes and waits for a reply.
pub(crate) fn bandwidth(
    peers: &[IpAddr],
    port: u16,
    size: u64,
    iters: u64,
    warmup: u64,
) -> std::io::Result<Summary> {
    let barrier = Arc::new(Barrier::new(peers.len()));
    let handles: Vec<_> = peers
        .iter()
        .map(|&p| {
            let b = barrier.clone();
            std::thread::spawn(move || -> std::io::Result<Vec<f64>> {
                let mut s = connect(p, port, BW, size)?;
                let buf = vec![0x5au8; size as usize];
                let mut ack = [0u8; 8];
                let mut times = Vec::new();
                b.wait();
                for i in 0..warmup + iters {
                    let t0 = Instant::now();
                    for _ in 0..WRITES_PER_SAMPLE {
                        s.write_all(&buf)?;
                    }
                    s.read_exact(&mut ack)?;
                    if i >= warmup {
                        times.push(t0.elapsed().as_secs_f64());
                    }
                }
                Ok(times)
            })
        })
        .collect();
    let per: Vec<Vec<f64>> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| Err(std::io::Error::other("raw stream panicked"))))
        .collect::<std::io::Result<_>>()?;
    // Sample i's aggregate rate: every stream's bytes over the slowest stream's time.
    let bytes = (WRITES_PER_SAMPLE * size * 8) as f64;
    let mut rates: Vec<f64> = (0..iters as usize)
        .map(|i| {
            let sum: f64 = per.iter().map(|t| bytes / t[i] / 1e6).sum();
            sum
        })
        .collect();
    Ok(summarize(&mut rates))
}

/// Ping-pong half round trip of `size` bytes on one stream (microseconds):
/// both ends busy-polling (`spin`, the floor) or both blocking in `read`.
pub(crate) fn latency(
    peer: IpAddr,
    port: u16,
    size: u64,
    iters: u64,
    warmup: u64,
    spin: bool,
) -> std::io::Result<Summary> {
    let mut s = connect(peer, port, if spin { LAT_SPIN } else { LAT }, size)?;
    let n = size as usize;
    let mut buf = vec![7u8; n.max(1)];
    let mut v = Vec::with_capacity(iters as usize);
    if spin {
        s.set_nonblocking(true)?;
    }
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        if spin {
            spin_write(&mut s, &buf[..n])?;
            spin_read(&mut s, &mut buf[..n])?;
        } else {
            s.write_all(&buf[..n])?;
            s.read_exact(&mut buf[..n])?;
        }
        if i >= warmup {
            v.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(summarize(&mut v))
}
