//! A byte-for-byte TCP proxy whose connections can all be cut at once, or
//! stalled (kept open, nothing forwarded: a peer that stops reading); it
//! keeps accepting and forwarding new ones (a link that heals), and counts
//! the bytes it carried.

#![allow(dead_code)] // each test binary uses some of these

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(crate) struct Proxy {
    streams: Arc<Mutex<Vec<TcpStream>>>,
    bytes: Arc<AtomicU64>,
    /// The stall switch of the connections made from now on.
    stalled: Arc<Mutex<Arc<AtomicBool>>>,
}

impl Proxy {
    /// Listens on `listen` and forwards each connection to `upstream`.
    pub(crate) fn start(listen: &str, upstream: &str) -> Proxy {
        Self::start_with(listen, upstream, None)
    }

    /// [`Proxy::start`], its listening socket's receive buffer set to
    /// `rcvbuf` bytes (so a stalled connection fills up soon).
    pub(crate) fn start_with(listen: &str, upstream: &str, rcvbuf: Option<usize>) -> Proxy {
        let l = TcpListener::bind(listen).unwrap();
        if let Some(n) = rcvbuf {
            rustix::net::sockopt::set_socket_recv_buffer_size(&l, n).unwrap();
        }
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let bytes: Arc<AtomicU64> = Arc::default();
        let stalled: Arc<Mutex<Arc<AtomicBool>>> = Arc::default();
        let (s2, b2, st2, up) =
            (streams.clone(), bytes.clone(), stalled.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for c in l.incoming().map_while(Result::ok) {
                let Ok(u) = TcpStream::connect(&up) else { continue };
                let _ = (c.set_nodelay(true), u.set_nodelay(true));
                let stall = st2.lock().unwrap().clone();
                let mut kept = s2.lock().unwrap();
                kept.push(c.try_clone().unwrap());
                kept.push(u.try_clone().unwrap());
                for (mut from, mut to) in [(c.try_clone().unwrap(), u.try_clone().unwrap()), (u, c)]
                {
                    let (b, stall) = (b2.clone(), stall.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        loop {
                            while stall.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            let Ok(n @ 1..) = from.read(&mut buf) else { break };
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            b.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        let _ = (from.shutdown(Shutdown::Both), to.shutdown(Shutdown::Both));
                    });
                }
            }
        });
        Proxy { streams, bytes, stalled }
    }

    /// Cuts every connection made so far (new ones are still accepted).
    pub(crate) fn cut(&self) {
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Stops forwarding on every connection made so far, keeping them open
    /// (new ones are forwarded).
    pub(crate) fn stall(&self) {
        let mut s = self.stalled.lock().unwrap();
        s.store(true, Ordering::Relaxed);
        *s = Arc::default();
        self.streams.lock().unwrap().clear();
    }

    /// Bytes carried so far, both ways.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
