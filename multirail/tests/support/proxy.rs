//! A byte-for-byte TCP proxy whose connections can all be cut at once, or
//! stalled (kept open, nothing forwarded: a peer that stops reading), or
//! stalled one way (the answers, acknowledgements included, held back), or
//! cut on the upstream side only (a link lost to one end: the client's
//! connection stays open and silent); it keeps accepting and forwarding
//! new ones (a link that heals), and counts the bytes it carried.

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
    /// The same, for the upstream-to-client direction alone.
    back: Arc<Mutex<Arc<AtomicBool>>>,
    /// The upstream ends of the connections made so far.
    ups: Arc<Mutex<Vec<TcpStream>>>,
    /// The switches [`Proxy::stall_back`] set (a cut lets their
    /// forwarders go, to find their connections ended).
    held: Mutex<Vec<Arc<AtomicBool>>>,
    /// Set by [`Proxy::cut_upstream`]: an ended upstream leaves its client's
    /// connection open.
    half: Arc<AtomicBool>,
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
        let back: Arc<Mutex<Arc<AtomicBool>>> = Arc::default();
        let ups: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let half: Arc<AtomicBool> = Arc::default();
        let (s2, b2, st2, up) =
            (streams.clone(), bytes.clone(), stalled.clone(), upstream.to_string());
        let (bk2, ups2, half2) = (back.clone(), ups.clone(), half.clone());
        std::thread::spawn(move || {
            for c in l.incoming().map_while(Result::ok) {
                let Ok(u) = TcpStream::connect(&up) else { continue };
                let _ = (c.set_nodelay(true), u.set_nodelay(true));
                let stall = st2.lock().unwrap().clone();
                let back = bk2.lock().unwrap().clone();
                let mut kept = s2.lock().unwrap();
                kept.push(c.try_clone().unwrap());
                kept.push(u.try_clone().unwrap());
                ups2.lock().unwrap().push(u.try_clone().unwrap());
                let ways =
                    [(c.try_clone().unwrap(), u.try_clone().unwrap(), None), (u, c, Some(back))];
                for (mut from, mut to, back) in ways {
                    let (b, stall, half) = (b2.clone(), stall.clone(), half2.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        let held = |b: &Option<Arc<AtomicBool>>| {
                            b.as_ref().is_some_and(|b| b.load(Ordering::Relaxed))
                        };
                        loop {
                            while stall.load(Ordering::Relaxed) || held(&back) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            let Ok(n @ 1..) = from.read(&mut buf) else { break };
                            // (Held while this read was under way: held too.)
                            while held(&back) {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                // A lost upstream drops what its client sends.
                                if back.is_none() && half.load(Ordering::Relaxed) {
                                    continue;
                                }
                                break;
                            }
                            b.fetch_add(n as u64, Ordering::Relaxed);
                        }
                        let _ = from.shutdown(Shutdown::Both);
                        // (The upstream ended alone: its client stays open.)
                        if back.is_none() || !half.load(Ordering::Relaxed) {
                            let _ = to.shutdown(Shutdown::Both);
                        }
                    });
                }
            }
        });
        Proxy { streams, bytes, stalled, back, ups, half, held: Mutex::default() }
    }

    /// Holds back everything the upstream sends on the connections made so
    /// far (the client's bytes still go through).
    pub(crate) fn stall_back(&self) {
        let mut s = self.back.lock().unwrap();
        s.store(true, Ordering::Relaxed);
        self.held.lock().unwrap().push(std::mem::take(&mut *s));
    }

    /// Ends the upstream side of every connection made so far; their
    /// clients' connections stay open, silent (new ones are forwarded).
    pub(crate) fn cut_upstream(&self) {
        self.half.store(true, Ordering::Relaxed);
        for s in self.ups.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Cuts every connection made so far (new ones are still accepted).
    pub(crate) fn cut(&self) {
        self.ups.lock().unwrap().clear();
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        for h in self.held.lock().unwrap().drain(..) {
            h.store(false, Ordering::Relaxed);
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
