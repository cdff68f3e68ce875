//! The transmit side of an endpoint: one ordered queue of frames per stream.
//!
//! A post first tries to write its frame straight into the socket without
//! blocking (`MSG_DONTWAIT`); only what the kernel does not take at once is
//! queued for the endpoint's sender thread. So a small DTO costs one
//! `writev` in the caller, a large one never blocks the caller, and the
//! queue is bounded by the EP's DTO window.

use crate::wire::{HDR, Header};
use rmr_api::MemRegion;
use smallvec::SmallVec;
use socket2::SockRef;
use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

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
    busy: bool,
    closed: bool,
    /// Next request sequence number (starts at 1).
    pub(crate) next_seq: u64,
}

pub(crate) struct Tx {
    stream: TcpStream,
    st: Mutex<TxState>,
    cv: Condvar,
}

enum Progress {
    Done,
    Blocked,
}

fn write_some(stream: &TcpStream, f: &mut OutFrame, flags: libc::c_int) -> io::Result<Progress> {
    let sock = SockRef::from(stream);
    while f.sent < f.total {
        let r = MemRegion::gather_io(
            &f.hdr,
            f.segs.iter().map(|s| (&*s.region, s.off, s.len)),
            f.sent,
            |iov| sock.send_vectored_with_flags(iov, flags | libc::MSG_NOSIGNAL),
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
            st: Mutex::new(TxState {
                queue: VecDeque::new(),
                busy: false,
                closed: false,
                next_seq: 1,
            }),
            cv: Condvar::new(),
        }
    }

    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, TxState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends (or queues) a frame. The caller holds the lock so that sequence
    /// numbers and wire order agree. `Err` means the stream is unusable.
    pub(crate) fn push(
        &self,
        st: &mut TxState,
        hdr: &Header,
        segs: Segs,
        last: bool,
    ) -> io::Result<()> {
        if st.closed {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "endpoint closed"));
        }
        let total = HDR + segs.iter().map(|s| s.len as usize).sum::<usize>();
        let mut f = OutFrame { hdr: hdr.encode(), segs, sent: 0, total, last };
        if st.queue.is_empty() && !st.busy {
            if let Progress::Done = write_some(&self.stream, &mut f, libc::MSG_DONTWAIT)? {
                if last {
                    st.closed = true;
                    let _ = self.stream.shutdown(std::net::Shutdown::Write);
                }
                return Ok(());
            }
        }
        if last {
            st.closed = true;
        }
        st.queue.push_back(f);
        self.cv.notify_one();
        Ok(())
    }

    /// Marks the queue closed and wakes the sender thread.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.queue.clear();
        drop(st);
        self.cv.notify_all();
    }

    /// The sender thread: writes queued frames with blocking writes until the
    /// queue is closed and empty. Returns the error that stopped it, if any.
    pub(crate) fn run_sender(&self) -> io::Result<()> {
        let mut st = self.lock();
        loop {
            let Some(mut f) = st.queue.pop_front() else {
                if st.closed {
                    return Ok(());
                }
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            st.busy = true;
            drop(st);
            let r = write_some(&self.stream, &mut f, 0);
            st = self.lock();
            st.busy = false;
            match r {
                Ok(_) if f.last => {
                    let _ = self.stream.shutdown(std::net::Shutdown::Write);
                }
                Ok(_) => {}
                Err(e) => {
                    st.closed = true;
                    st.queue.clear();
                    return Err(e);
                }
            }
        }
    }
}
