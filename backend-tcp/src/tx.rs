//! The transmit side of an endpoint: one ordered queue of frames per stream.
//!
//! A small frame (a header and at most [`HOLD_FRAME`] bytes of payload) is
//! not written at once: it is copied into a *held* batch that the next
//! frame, or the next thread that drives the endpoint, sends with it in one
//! system call — the doorbell batching of verbs, without a doorbell call in
//! the API. So a write+notify costs one `send`, like a raw TCP ping-pong,
//! and a burst of small DTOs costs one `send` per 64 KiB. A thread that
//! waits on one of the endpoint's EVDs drives it, which rings the doorbell;
//! a held batch that nobody drives is sent by the endpoint's progress
//! thread. Large frames are written straight from registered memory with
//! `writev` (never staged); what the kernel does not take at once is queued
//! and flushed by whoever drives the endpoint next. With
//! [`crate::TcpConfig::zerocopy`], a large request's payload goes with
//! `MSG_ZEROCOPY` ([`crate::zerocopy`]).

use crate::wire::{HDR, Header};
use crate::zerocopy::Zc;
use rmr_api::MemRegion;
use rmr_api::provider::clock::{instant_of, now_ns};
use rmr_api::provider::io::MSG_ZEROCOPY;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Largest payload a frame may have to be held for batching.
pub(crate) const HOLD_FRAME: u64 = 4 << 10;
/// A held batch is sent once it reaches this size.
const HOLD_BATCH: usize = 64 << 10;
/// A batch held only by posters that ring the doorbell themselves
/// ([`rmr_api::provider::with_deferred_doorbell`]) is left to them; should one not,
/// whoever drives the endpoint sends the batch once it is this old.
const DEFERRED_GRACE: Duration = Duration::from_micros(500);

/// A range of registered memory that a frame carries or that a response fills.
#[derive(Clone)]
pub(crate) struct Seg {
    pub(crate) region: Arc<MemRegion>,
    pub(crate) off: u64,
    pub(crate) len: u64,
}

pub(crate) type Segs = SmallVec<[Seg; 2]>;

/// What goes before a frame's payload: its header, or a held batch of
/// small frames followed by the header.
enum Head {
    /// A header and its length.
    Hdr([u8; HDR], u8),
    Batch(Vec<u8>),
}

impl Head {
    fn bytes(&self) -> &[u8] {
        match self {
            Head::Hdr(h, n) => &h[..usize::from(*n)],
            Head::Batch(b) => b,
        }
    }
}

struct OutFrame {
    head: Head,
    segs: Segs,
    sent: usize,
    total: usize,
    /// Shut the write side down once this frame is out (orderly disconnect).
    last: bool,
    /// A request whose payload goes zero-copy: its sequence number.
    zc_seq: Option<u64>,
}

pub(crate) struct TxState {
    queue: VecDeque<OutFrame>,
    /// Small frames waiting to go out with the next frame or drive (only
    /// while the queue is empty, so that wire order is posting order).
    held: Vec<u8>,
    /// When the held batch began, on the `clock::now_ns` scale (0: none).
    held_since: u64,
    /// A poster that does not ring the doorbell itself added to the held
    /// batch: whoever drives the endpoint sends it (and is woken for it).
    held_open: bool,
    closed: bool,
    /// Next request sequence number (starts at 1).
    pub(crate) next_seq: u64,
    /// The last ack put on the stream (a frame carries one only when it
    /// is news: see `wire`).
    wire_ack: u64,
}

/// What [`Tx::push`] did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Written to the socket.
    Sent,
    /// Held for batching; `true` when it started a new batch.
    Held(bool),
    /// Queued behind a full socket; `true` when the queue was empty.
    Queued(bool),
}

pub(crate) struct Tx {
    stream: TcpStream,
    st: Mutex<TxState>,
    /// Frames wait in the queue / in a held batch: published under the lock,
    /// read without it — a thread driving the endpoint (or polling it) does
    /// not take the lock (and wait for a writer in the middle of a `send`)
    /// when there is nothing to write, which is nearly always.
    has_queue: AtomicBool,
    /// A held batch that drivers send (see `TxState::held_open`).
    has_held: AtomicBool,
    /// Any held batch, and when it began (on the `clock::now_ns` scale; 0: none).
    has_any_held: AtomicBool,
    held_at: AtomicU64,
    /// Bytes written to the socket (diagnostics).
    pub(crate) tx_bytes: AtomicU64,
    /// Frames in the queue, readable without the lock (the receive side
    /// stops taking requests while too many wait: see `EpShared::tx_backlogged`).
    queued: AtomicUsize,
    /// Zero-copy sends, when configured and the socket took them.
    pub(crate) zc: Option<Zc>,
}

enum Progress {
    Done,
    Blocked,
}

fn write_some(stream: &TcpStream, f: &mut OutFrame, zc: Option<&Zc>) -> io::Result<Progress> {
    if let (Some(z), Some(seq)) = (zc, f.zc_seq) {
        return write_zerocopy(stream, f, z, seq);
    }
    rmr_api::stages::stamp(rmr_api::stages::Stage::TxWrite);
    while f.sent < f.total {
        let r =
            send(stream, f.head.bytes(), &f.segs, f.sent, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)?;
        if let Some(p) = wrote(f, r)? {
            return Ok(p);
        }
    }
    Ok(Progress::Done)
}

/// What a `sendmsg` of a frame's bytes did: `Some` ends the write (the
/// socket is full), `None` goes on.
#[inline(always)]
fn wrote(f: &mut OutFrame, r: io::Result<usize>) -> io::Result<Option<Progress>> {
    match r {
        Ok(0) => Err(io::Error::new(io::ErrorKind::WriteZero, "socket closed")),
        Ok(n) => {
            f.sent += n;
            rmr_api::stages::stamp(rmr_api::stages::Stage::TxDone);
            Ok(None)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Some(Progress::Blocked)),
        Err(e) => Err(e),
    }
}

/// [`write_some`] for a zero-copy request frame: its head alone first
/// (copied: its buffer is reused at once), then its payload from
/// registered memory, ending the record.
#[inline(never)]
fn write_zerocopy(stream: &TcpStream, f: &mut OutFrame, z: &Zc, seq: u64) -> io::Result<Progress> {
    rmr_api::stages::stamp(rmr_api::stages::Stage::TxWrite);
    let base = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    let head_len = f.head.bytes().len();
    while f.sent < f.total {
        let r = if f.sent < head_len {
            send_payload_head(stream, f.head.bytes(), f.sent, base | libc::MSG_MORE)?
        } else {
            let skip = f.sent - head_len;
            z.begin(seq);
            let r = send_payload(stream, &f.segs, skip, base | MSG_ZEROCOPY | libc::MSG_EOR);
            z.end(matches!(r, Ok(Ok(n)) if n > 0), || {
                f.segs.iter().map(|s| s.region.clone()).collect()
            });
            match r? {
                // Refused (no room for the notice, or over the
                // locked-memory limit): copy this time.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    z.refused();
                    send_payload(stream, &f.segs, skip, base | libc::MSG_EOR)?
                }
                r => r,
            }
        };
        if let Some(p) = wrote(f, r)? {
            return Ok(p);
        }
    }
    Ok(Progress::Done)
}

/// A zero-copy frame's payload from byte `skip` on (a `send_gather` of
/// its own, so that the plain path's stays inlined in [`write_some`]).
fn send_payload(
    stream: &TcpStream,
    segs: &Segs,
    skip: usize,
    flags: i32,
) -> io::Result<io::Result<usize>> {
    rmr_api::provider::io::send_gather(
        stream.as_fd(),
        &[],
        segs.iter().map(|s| (&*s.region, s.off, s.len)),
        skip,
        flags,
    )
    .map_err(|e| io::Error::other(e.to_string()))
}

/// A zero-copy frame's head from byte `skip` on.
fn send_payload_head(
    stream: &TcpStream,
    head: &[u8],
    skip: usize,
    flags: i32,
) -> io::Result<io::Result<usize>> {
    rmr_api::provider::io::send_gather(stream.as_fd(), head, std::iter::empty(), skip, flags)
        .map_err(|e| io::Error::other(e.to_string()))
}

/// One `sendmsg` of `head` and `segs` from byte `skip` on (the plain
/// path's only call).
#[inline(always)]
fn send(
    stream: &TcpStream,
    head: &[u8],
    segs: &Segs,
    skip: usize,
    flags: i32,
) -> io::Result<io::Result<usize>> {
    rmr_api::provider::io::send_gather(
        stream.as_fd(),
        head,
        segs.iter().map(|s| (&*s.region, s.off, s.len)),
        skip,
        flags,
    )
    .map_err(|e| io::Error::other(e.to_string()))
}

impl Tx {
    /// The transmit side of `stream`; `zc`: its zero-copy sends, if any.
    pub(crate) fn new(stream: TcpStream, zc: Option<Zc>) -> Tx {
        Tx {
            zc,
            stream,
            st: Mutex::new(TxState {
                queue: VecDeque::new(),
                held: Vec::new(),
                held_since: 0,
                held_open: false,
                closed: false,
                next_seq: 1,
                wire_ack: 0,
            }),
            tx_bytes: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            has_queue: AtomicBool::new(false),
            has_held: AtomicBool::new(false),
            has_any_held: AtomicBool::new(false),
            held_at: AtomicU64::new(0),
        }
    }

    /// Publishes what waits (call before the lock is released).
    fn publish(&self, st: &TxState) {
        self.queued.store(st.queue.len(), Ordering::Release);
        self.has_queue.store(!st.queue.is_empty(), Ordering::SeqCst);
        let any = !st.held.is_empty();
        let at = if any { st.held_since } else { 0 };
        self.held_at.store(at, Ordering::SeqCst);
        self.has_any_held.store(any, Ordering::SeqCst);
        self.has_held.store(any && st.held_open, Ordering::SeqCst);
    }

    /// When a batch held only for posters that flush it themselves is due
    /// to be sent by a driver anyway.
    pub(crate) fn deferred_due(&self) -> Option<Instant> {
        if !self.has_any_held.load(Ordering::SeqCst) || self.has_held.load(Ordering::SeqCst) {
            return None;
        }
        match self.held_at.load(Ordering::SeqCst) {
            0 => None,
            at => Some(instant_of(at) + DEFERRED_GRACE),
        }
    }

    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, TxState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends, holds or queues a frame. The caller holds the lock so that
    /// sequence numbers and wire order agree; `hold` allows batching a small
    /// frame; `request`: the frame is a request (`hdr.seq`), whose payload
    /// may go zero-copy. `Err` means the stream is unusable.
    pub(crate) fn push(
        &self,
        st: &mut TxState,
        hdr: &Header,
        segs: Segs,
        last: bool,
        hold: bool,
        request: bool,
    ) -> io::Result<Pushed> {
        if st.closed {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "endpoint closed"));
        }
        let payload: u64 = segs.iter().map(|s| s.len).sum();
        let zc_seq = self
            .zc
            .as_ref()
            .filter(|z| request && !last && payload > 0 && z.wants(payload))
            .map(|_| hdr.seq);
        // Encoded here, in wire order (the lock is held): the ack it carries
        // or leaves out is relative to the frame before it on the stream.
        let ack_before = st.wire_ack;
        let mut hb = [0u8; HDR];
        let n = hdr.encode_data(&mut st.wire_ack, &mut hb);
        if hold
            && zc_seq.is_none()
            && !last
            && st.queue.is_empty()
            && payload <= HOLD_FRAME
            && st.held.len() + HDR + payload as usize <= HOLD_BATCH
        {
            // A payload that cannot be read leaves no trace in the batch: a
            // header without its payload would make the peer read the
            // next frames as payload.
            let len_before = st.held.len();
            st.held.extend_from_slice(&hb[..n]);
            for s in &segs {
                if let Err(e) = s.region.append_to(s.off, s.len, &mut st.held) {
                    st.held.truncate(len_before);
                    st.wire_ack = ack_before;
                    return Err(io::Error::other(e.to_string()));
                }
            }
            if st.held_since == 0 {
                st.held_since = now_ns().max(1);
            }
            // The batch is news to drivers only when it opens to them.
            let deferred = rmr_api::provider::doorbell_deferred();
            let opened = !deferred && !st.held_open;
            st.held_open |= !deferred;
            self.publish(st);
            return Ok(Pushed::Held(opened));
        }
        if last {
            st.closed = true;
        }
        let head = if st.held.is_empty() {
            Head::Hdr(hb, n as u8)
        } else {
            let mut b = std::mem::take(&mut st.held);
            b.extend_from_slice(&hb[..n]);
            st.held_since = 0;
            st.held_open = false;
            Head::Batch(b)
        };
        let total = head.bytes().len() + payload as usize;
        let mut f = OutFrame { head, segs, sent: 0, total, last, zc_seq };
        if !st.queue.is_empty() {
            let r = self.flush_locked(st);
            self.publish(st);
            r?;
        }
        let was_empty = st.queue.is_empty();
        if was_empty {
            let r = write_some(&self.stream, &mut f, self.zc.as_ref());
            self.tx_bytes.fetch_add(f.sent as u64, Ordering::Relaxed);
            if let Progress::Done = r.inspect_err(|_| self.publish(st))? {
                self.done(st, f);
                self.publish(st);
                return Ok(Pushed::Sent);
            }
        }
        st.queue.push_back(f);
        self.queued.store(st.queue.len(), Ordering::Release);
        self.publish(st);
        Ok(Pushed::Queued(was_empty))
    }

    /// A frame is fully written: shut down after the last one; keep a
    /// batch's buffer for the next batch.
    fn done(&self, st: &mut TxState, f: OutFrame) {
        if f.last {
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
        }
        if let Head::Batch(mut b) = f.head {
            if st.held.capacity() == 0 {
                b.clear();
                st.held = b;
            }
        }
    }

    /// Frames waiting in the queue.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Whether frames wait for the socket to drain, and in a held batch
    /// that drivers send (without taking the lock).
    pub(crate) fn pending(&self) -> (bool, bool) {
        (self.has_queue.load(Ordering::SeqCst), self.has_held.load(Ordering::SeqCst))
    }

    /// Sends the held batch and writes queued frames until the socket would
    /// block. Returns whether any frame finished; `Err` means the stream is
    /// unusable.
    pub(crate) fn flush(&self) -> io::Result<bool> {
        // Nothing waits (the common case): no lock. A frame held or queued
        // just after this look wakes (or is sent by) its poster. A batch
        // whose posters send it themselves is theirs until it is overdue:
        // taking it would split their batch and wait for their lock.
        let due = self.has_queue.load(Ordering::SeqCst)
            || self.has_held.load(Ordering::SeqCst)
            || self.deferred_due().is_some_and(|d| Instant::now() >= d);
        if !due {
            return Ok(false);
        }
        self.flush_all()
    }

    /// Sends the held batch, whoever it was held for, and writes queued
    /// frames until the socket would block (the doorbell of
    /// `Driver::flush`).
    pub(crate) fn flush_all(&self) -> io::Result<bool> {
        if !self.has_queue.load(Ordering::SeqCst) && !self.has_any_held.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let mut st = self.lock();
        if st.queue.is_empty() && st.held.is_empty() {
            return Ok(false);
        }
        let r = self.flush_locked(&mut st);
        self.publish(&st);
        r
    }

    fn flush_locked(&self, st: &mut TxState) -> io::Result<bool> {
        if !st.held.is_empty() {
            // Held only while the queue is empty: the batch goes first.
            let b = std::mem::take(&mut st.held);
            st.held_since = 0;
            st.held_open = false;
            let total = b.len();
            st.queue.push_back(OutFrame {
                head: Head::Batch(b),
                segs: Segs::new(),
                sent: 0,
                total,
                last: false,
                zc_seq: None,
            });
        }
        let mut moved = false;
        while let Some(f) = st.queue.front_mut() {
            let before = f.sent;
            let r = write_some(&self.stream, f, self.zc.as_ref());
            self.tx_bytes.fetch_add((f.sent - before) as u64, Ordering::Relaxed);
            match r {
                Ok(Progress::Done) => {
                    let f = st.queue.pop_front().expect("front");
                    self.done(st, f);
                    moved = true;
                }
                Ok(Progress::Blocked) => break,
                Err(e) => {
                    st.closed = true;
                    st.queue.clear();
                    self.queued.store(0, Ordering::Release);
                    return Err(e);
                }
            }
        }
        self.queued.store(st.queue.len(), Ordering::Release);
        Ok(moved)
    }

    /// Marks the queue closed and drops what it holds.
    ///
    /// Zero-copy payloads the kernel still holds keep going out from the
    /// user's memory: the end of a connection aborts a stream that holds
    /// any (`EpShared::finish_owing`), and so does [`Tx`]'s drop.
    pub(crate) fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.queue.clear();
        self.queued.store(0, Ordering::Release);
        st.held.clear();
        st.held_since = 0;
        st.held_open = false;
        self.publish(&st);
    }
}

impl Drop for Tx {
    /// A stream closed while the kernel still holds zero-copy payloads
    /// would go on sending them from memory whose regions go with the
    /// [`Zc`] (and may be reused): such a stream is aborted, which drops
    /// what the kernel has yet to send.
    fn drop(&mut self) {
        if self.zc.as_ref().is_some_and(|z| z.holds(self.stream.as_fd())) {
            let _ = rmr_api::provider::io::abort_tcp(self.stream.as_fd());
        }
    }
}
