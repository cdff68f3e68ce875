//! The receive side of an endpoint: a resumable frame parser over the
//! non-blocking socket, run by whoever drives the endpoint (a thread waiting
//! on one of its EVDs, or the IA's progress helper). It places RDMA payloads
//! straight from the socket into registered memory after checking key,
//! rights, protection zone and bounds; anything that fails a check is
//! drained from the stream and answered with a NAK, never written.

use crate::tx::Segs;
use crate::wire::{HDR, Header};
use rmr_api::{DtoCompletion, Status};
use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Instant;

/// Why the connection ended.
pub(crate) enum End {
    Orderly,
    Broken(String),
    /// Broken by this end's refusal of the peer's frame, which it told the
    /// peer (a nak): what is queued, the nak included, still goes (a broken
    /// connection is aborted otherwise).
    Refused(String),
}

pub(super) fn io_end(what: &str, e: io::Error) -> End {
    End::Broken(format!("{what}: {e}"))
}

pub(super) const PEER_CLOSED: &str = "peer closed the connection";

/// Input buffer size: many small frames per `read`.
pub(super) const BUF: usize = 64 << 10;
/// Payload runs at least this long are read straight into their destination.
pub(super) const DIRECT: u64 = 8 << 10;

/// What follows once a payload has been placed or drained.
pub(super) enum Then {
    /// A write was handled.
    Request,
    /// A write-with-immediate was placed: it now needs a receive.
    NeedRecv,
    /// A receive was filled: complete it.
    Recv(DtoCompletion),
    /// The receive was too small: error completion and a NAK.
    TooSmall(DtoCompletion),
    /// A refused write: NAK with this status.
    Nak(Status),
    /// A read response was placed: complete the read (if signalled).
    ReadResp(Option<DtoCompletion>),
}

pub(super) enum Phase {
    Header,
    /// A send or write-with-immediate waiting for a posted receive.
    NeedRecv {
        h: Header,
        /// Since when it waits: read the first time no receive was there
        /// (a frame that finds one reads no clock).
        since: Option<Instant>,
    },
    /// Placing `left` payload bytes into `segs`, at segment `idx`, byte `at`.
    Place {
        h: Header,
        segs: Segs,
        idx: usize,
        at: u64,
        left: u64,
        then: Then,
    },
    /// Discarding `left` payload bytes.
    Drain {
        h: Header,
        left: u64,
        then: Then,
    },
}

/// The receive state of one stream.
pub(crate) struct RxState {
    pub(super) buf: Box<[u8]>,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) phase: Phase,
    /// Next expected request sequence number (the next request's: the
    /// wire counts requests, see `wire`).
    pub(super) expect: u64,
    /// The last ack the stream carried (a frame without one repeats it).
    pub(super) last_ack: u64,
    pub(super) ack_wanted: bool,
    /// The acknowledgement wanted must not wait for the ack delay (the
    /// initiator waits for it: `F_ACK_NOW`).
    pub(super) ack_now: bool,
    pub(super) rx_bytes: u64,
    /// The last read in this pass did not fill the space it was given: the
    /// socket was empty then, so the pass ends without a read that would
    /// only say so (whatever arrives later makes the socket readable for
    /// the next poll).
    pub(super) short: bool,
}

pub(super) enum Step {
    More,
    Blocked,
    Stalled,
}

impl Then {
    /// The completion this step owes its DTO (a receive or read whose
    /// payload was being placed), if any.
    pub(super) fn owed(self) -> Option<DtoCompletion> {
        match self {
            Then::Recv(c) | Then::TooSmall(c) => Some(c),
            Then::ReadResp(c) => c,
            Then::Request | Then::NeedRecv | Then::Nak(_) => None,
        }
    }
}

impl RxState {
    /// Takes the completion owed to a receive or read whose payload is
    /// being placed or drained: the stream ended under it, and the DTO must
    /// still complete once (it is no longer among the posted receives or
    /// the requests in flight that the end flushes).
    pub(crate) fn take_owed(&mut self) -> Option<DtoCompletion> {
        match std::mem::replace(&mut self.phase, Phase::Header) {
            Phase::Place { then, .. } | Phase::Drain { then, .. } => then.owed(),
            p => {
                self.phase = p;
                None
            }
        }
    }

    pub(crate) fn new() -> RxState {
        RxState {
            buf: vec![0u8; BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            phase: Phase::Header,
            expect: 1,
            last_ack: 0,
            ack_wanted: false,
            ack_now: false,
            rx_bytes: 0,
            short: false,
        }
    }

    /// The parser's state, for diagnostics.
    pub(crate) fn describe(&self) -> String {
        let phase = match &self.phase {
            Phase::Header => "header".to_string(),
            Phase::NeedRecv { h, .. } => format!("need-recv seq {}", h.seq),
            Phase::Place { h, left, .. } => format!("place op {} seq {} left {left}", h.op, h.seq),
            Phase::Drain { h, left, .. } => format!("drain seq {} left {left}", h.seq),
        };
        format!(
            "{phase} buffered={} expect={} rx_bytes={}",
            self.avail(),
            self.expect,
            self.rx_bytes
        )
    }

    pub(super) fn avail(&self) -> usize {
        self.end - self.start
    }

    /// Whether a whole frame header is buffered (or a malformed one, which
    /// the next step reports).
    pub(super) fn header_buffered(&self) -> bool {
        crate::wire::header_complete(&self.buf[self.start..self.end])
    }

    /// Reads what the socket has into the buffer. `Ok(false)`: would block.
    pub(super) fn fill(&mut self, mut sock: &TcpStream) -> Result<bool, End> {
        if self.short {
            return Ok(false);
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < HDR {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match sock.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(End::Broken(PEER_CLOSED.into())),
                Ok(n) => {
                    rmr_api::stages::stamp(rmr_api::stages::Stage::RxData);
                    self.short = n < self.buf.len() - self.end;
                    self.rx_bytes += n as u64;
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(io_end("read", e)),
            }
        }
    }
}
