//! A byte-for-byte TCP proxy whose connections can all be cut at once; it
//! keeps accepting new ones (a link that heals), and counts the bytes it
//! carried.

#![allow(dead_code)] // each test binary uses some of these

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) struct Proxy {
    streams: Arc<Mutex<Vec<TcpStream>>>,
    bytes: Arc<AtomicU64>,
}

impl Proxy {
    /// Listens on `listen` and forwards each connection to `upstream`.
    pub(crate) fn start(listen: &str, upstream: &str) -> Proxy {
        let l = TcpListener::bind(listen).unwrap();
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let bytes: Arc<AtomicU64> = Arc::default();
        let (s2, b2, up) = (streams.clone(), bytes.clone(), upstream.to_string());
        std::thread::spawn(move || {
            for c in l.incoming().map_while(Result::ok) {
                let Ok(u) = TcpStream::connect(&up) else { continue };
                let _ = (c.set_nodelay(true), u.set_nodelay(true));
                let mut kept = s2.lock().unwrap();
                kept.push(c.try_clone().unwrap());
                kept.push(u.try_clone().unwrap());
                for (mut from, mut to) in [(c.try_clone().unwrap(), u.try_clone().unwrap()), (u, c)]
                {
                    let b = b2.clone();
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
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
        Proxy { streams, bytes }
    }

    /// Cuts every connection made so far (new ones are still accepted).
    pub(crate) fn cut(&self) {
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Bytes carried so far, both ways.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
