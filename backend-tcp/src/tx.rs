//! The transmit side of an endpoint: one ordered queue of frames per stream.
//!
//! A post first writes its frame straight into the socket without blocking;
//! only what the kernel does not take at once is queued, and whoever drives
//! the endpoint next (a thread waiting on one of its EVDs, a later post, or
//! the endpoint's progress thread) flushes the queue as the socket drains.
//! So a small DTO costs one `writev` in the caller, a large one never blocks
//! the caller, and the queue is bounded by the EP's DTO window.

use crate::wire::{HDR, Header};
use rmr_api::MemRegion;
use smallvec::SmallVec;
use socket2::SockRef;
use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A range of registered memory that a frame carries or that a response fills.
#[derive(Clone)]
pub(crate) struct Seg {
    pub(crate) region: Arc<MemRegion>,
    pub(crate) off: u64,
    pub(crate) len: u64,
}

pub(crate) type Segs = SmallVec<[Seg; 2]>;

pub(crate) struct OutFrame {
    hdr: [u8; HDR],
    segs: Segs,
    sent: usize,
    total: usize,
    /// Shut the write side down once this frame is out (orderly disconnect).
    last: bool,
}

pub(crate) struct TxState {
    queue: VecDeque<OutFrame>,
    closed: bool,
    /// Next request sequence number (starts at 1).
    pub(crate) next_seq: u64,
}

pub(crate) struct Tx {
    stream: TcpStream,
    st: Mutex<TxState>,
    /// Bytes written to the socket (diagnostics).
    pub(crate) tx_bytes: AtomicU64,
}

enum Progress {
    Done,
    Blocked,
}

fn write_some(stream: &TcpStream, f: &mut OutFrame) -> io::Result<Progress> {
    let sock = SockRef::from(stream);
    while f.sent < f.total {
        let r = MemRegion::gather_io(
            &f.hdr,
            f.segs.iter().map(|s| (&*s.region, s.off, s.len)),
            f.sent,
            |iov| sock.send_vectored_with_flags(iov, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL),
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        match r {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed")),
            Ok(n) => f.sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Progress::Blocked),
            Err(e) => return Err(e),
        }
    }
    Ok(Progress::Done)
}

impl Tx {
    pub(crate) fn new(stream: TcpStream) -> Tx {
        Tx {
            stream,
            st: Mutex::new(TxState { queue: VecDeque::new(), closed: false, next_seq: 1 }),
            tx_bytes: AtomicU64::new(0),
        }
    }

    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, TxState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends (or queues) a frame. The caller holds the lock so that sequence
    /// numbers and wire order agree. Returns true when the frame had to wait
    /// in a queue that was empty (the caller makes sure someone will drive
    /// the EP); `Err` means the stream is unusable.
    pub(crate) fn push(
        &self,
        st: &mut TxState,
        hdr: &Header,
        segs: Segs,
        last: bool,
    ) -> io::Result<bool> {
        if st.closed {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "endpoint closed"));
        }
        let total = HDR + segs.iter().map(|s| s.len as usize).sum::<usize>();
        let mut f = OutFrame { hdr: hdr.encode(), segs, sent: 0, total, last };
        if last {
            st.closed = true;
        }
        if !st.queue.is_empty() {
            self.flush_locked(st)?;
        }
        let was_empty = st.queue.is_empty();
        if was_empty {
            let r = write_some(&self.stream, &mut f);
            self.tx_bytes.fetch_add(f.sent as u64, Ordering::Relaxed);
            if let Progress::Done = r? {
                if last {
                    let _ = self.stream.shutdown(std::net::Shutdown::Write);
                }
                return Ok(false);
            }
        }
        st.queue.push_back(f);
        Ok(was_empty)
    }

    /// Frames waiting in the queue.
    pub(crate) fn queued(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether frames wait for the socket to drain.
    pub(crate) fn pending(&self) -> bool {
        !self.lock().queue.is_empty()
    }

    /// Writes queued frames until the socket would block. Returns whether
    /// any frame finished; `Err` means the stream is unusable.
    pub(crate) fn flush(&self) -> io::Result<bool> {
        let mut st = self.lock();
        if st.queue.is_empty() {
            return Ok(false);
        }
        self.flush_locked(&mut st)
    }

    fn flush_locked(&self, st: &mut TxState) -> io::Result<bool> {
        let mut moved = false;
        while let Some(f) = st.queue.front_mut() {
            let before = f.sent;
            let r = write_some(&self.stream, f);
            self.tx_bytes.fetch_add((f.sent - before) as u64, Ordering::Relaxed);
            match r {
                Ok(Progress::Done) => {
                    let f = st.queue.pop_front().expect("front");
                    if f.last {
                        let _ = self.stream.shutdown(std::net::Shutdown::Write);
                    }
                    moved = true;
                }
                Ok(Progress::Blocked) => break,
                Err(e) => {
                    st.closed = true;
                    st.queue.clear();
                    return Err(e);
                }
            }
        }
        Ok(moved)
    }

    /// Marks the queue closed and drops what it holds.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.queue.clear();
    }
}
