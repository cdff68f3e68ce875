//! The wire protocol: a little-endian header, optionally followed by a
//! payload. Pure functions, no IO: the codec is unit-tested and fuzzed on
//! its own.
//!
//! The connection handshake (request, accept, reject) uses the full
//! 56-byte header ([`Header::encode`], [`Header::decode`]):
//!
//! ```text
//!  0 op u8 | 1 flags u8 | 2 status u16 | 4 len u32   (payload bytes that follow)
//!  8 seq u64     request sequence number (or the one a response answers)
//! 16 ack u64     cumulative: every request of the peer with seq <= ack is done
//! 24 key u64     remote key
//! 32 addr u64    remote address
//! 40 arg0 u64    immediate / add / compare / read length / protocol magic
//! 48 arg1 u64    swap
//! ```
//!
//! Frames on a live stream carry only the fields their op uses
//! ([`Header::encode_data`], [`decode_data`]): 6 bytes of op, flags and
//! payload length, then, in this order and only where the op has them,
//! status u16 (a NAK), seq16 u16 (a request: the low 16 bits of its
//! sequence number), seq u64 (a response: the request it answers), ack u64
//! (when [`F_ACK`] is set), key and addr u64 (a request on remote memory),
//! arg0 u64 and arg1 u64 (an immediate, read length, addend, compare, swap
//! or old value). The stream is ordered and its requests are numbered 1,
//! 2, ... in it, so the receiver counts them; the low bits it is sent show
//! a frame lost or repeated on the way. An ack is sent when it is news (it
//! differs from the last one this side put on the stream; always on an ack
//! or disconnect frame); without one, a frame acknowledges what the last
//! one did. An 8-byte write and its notify take 8 + 16 + 8 (payload) + 8
//! (ack) + 8 = 48 bytes, not 56 + 8 + 56: on a 1 Gbit/s link, 0.6 us less
//! per message on the wire.

/// Largest header in bytes (every field; the handshake's fixed header).
pub const HDR: usize = 56;
/// Smallest header on a live stream: op, flags and payload length.
pub const MIN_HDR: usize = 6;
/// `arg0` of a connection request: "RMR" + protocol version 2 (version 2:
/// frames on a live stream carry only the fields their op uses).
pub const MAGIC: u64 = 0x524d_5200 | VERSION as u64;
/// The protocol version this build speaks (the low byte of [`MAGIC`]).
pub const VERSION: u8 = 2;
/// Largest payload of one frame (and so of one DTO).
pub const MAX_PAYLOAD: u64 = 1 << 30;
/// Largest private data in a connection request or reply.
pub const MAX_PRIVATE: usize = 1024;

/// Frame operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Connection request; payload = private data; arg0 = [`MAGIC`].
    ConnReq = 1,
    /// Connection accepted; payload = private data.
    ConnAccept = 2,
    /// Connection rejected; payload = private data.
    ConnReject = 3,
    /// Two-sided send; payload = message.
    Send = 4,
    /// RDMA write; key, addr; payload = data.
    Write = 5,
    /// RDMA write with immediate (arg0); consumes a receive.
    WriteImm = 6,
    /// RDMA read request of arg0 bytes at key/addr.
    ReadReq = 7,
    /// RDMA read response for `seq`; payload = data.
    ReadResp = 8,
    /// Fetch-and-add arg0 at key/addr.
    FetchAdd = 9,
    /// Compare (arg0) and swap (arg1) at key/addr.
    CmpSwap = 10,
    /// Atomic response for `seq`; arg0 = old value.
    AtomicResp = 11,
    /// Standalone cumulative acknowledgement.
    Ack = 12,
    /// Negative acknowledgement of `seq` with `status`.
    Nak = 13,
    /// Orderly close.
    Disconnect = 14,
}

impl Op {
    fn from_u8(v: u8) -> Option<Op> {
        use Op::*;
        Some(match v {
            1 => ConnReq,
            2 => ConnAccept,
            3 => ConnReject,
            4 => Send,
            5 => Write,
            6 => WriteImm,
            7 => ReadReq,
            8 => ReadResp,
            9 => FetchAdd,
            10 => CmpSwap,
            11 => AtomicResp,
            12 => Ack,
            13 => Nak,
            14 => Disconnect,
            _ => return None,
        })
    }

    /// Requests carry a sequence number and get an ack, NAK or response.
    pub fn is_request(self) -> bool {
        matches!(
            self,
            Op::Send | Op::Write | Op::WriteImm | Op::ReadReq | Op::FetchAdd | Op::CmpSwap
        )
    }

    /// Whether frames of this op may carry a payload.
    fn may_have_payload(self) -> bool {
        matches!(
            self,
            Op::ConnReq
                | Op::ConnAccept
                | Op::ConnReject
                | Op::Send
                | Op::Write
                | Op::WriteImm
                | Op::ReadResp
        )
    }
}

/// Flag: the initiator wants an acknowledgement soon (a signalled DTO, or
/// its window is filling).
pub const F_ACK_REQ: u8 = 1;
/// Flag: the send is solicited.
pub const F_SOLICITED: u8 = 2;
/// Flag: the initiator waits for this DTO: acknowledge it at once, not
/// after the acknowledgement delay (with [`F_ACK_REQ`]).
pub const F_ACK_NOW: u8 = 4;

/// Flag, on a live stream only: the frame carries an ack field (set by
/// [`Header::encode_data`], read by [`decode_data`]).
pub const F_ACK: u8 = 0x80;

/// Which optional fields a live-stream frame of an op carries (see the
/// module docs), as bits of [`LAYOUT`]: a NAK's status.
const STATUS: u8 = 1;
/// A request's low 16 sequence bits.
const SEQ16: u8 = 2;
/// A response's whole sequence number.
const SEQ: u8 = 4;
/// Key and address.
const REMOTE: u8 = 8;
/// The first argument.
const ARG0: u8 = 16;
/// The second argument.
const ARG1: u8 = 32;
/// The byte names an op.
const KNOWN: u8 = 64;

/// The fields of each op's live-stream header, by op byte.
const LAYOUT: [u8; 16] = {
    let mut t = [0u8; 16];
    t[Op::ConnReq as usize] = KNOWN;
    t[Op::ConnAccept as usize] = KNOWN;
    t[Op::ConnReject as usize] = KNOWN;
    t[Op::Send as usize] = KNOWN | SEQ16;
    t[Op::Write as usize] = KNOWN | SEQ16 | REMOTE;
    t[Op::WriteImm as usize] = KNOWN | SEQ16 | REMOTE | ARG0;
    t[Op::ReadReq as usize] = KNOWN | SEQ16 | REMOTE | ARG0;
    t[Op::ReadResp as usize] = KNOWN | SEQ;
    t[Op::FetchAdd as usize] = KNOWN | SEQ16 | REMOTE | ARG0;
    t[Op::CmpSwap as usize] = KNOWN | SEQ16 | REMOTE | ARG0 | ARG1;
    t[Op::AtomicResp as usize] = KNOWN | SEQ | ARG0;
    t[Op::Ack as usize] = KNOWN;
    t[Op::Nak as usize] = KNOWN | STATUS | SEQ;
    t[Op::Disconnect as usize] = KNOWN;
    t
};

/// The layout bits of op byte `op` (0: no op).
#[inline]
fn layout(op: u8) -> u8 {
    LAYOUT.get(usize::from(op)).copied().unwrap_or(0)
}

/// Header length for layout bits `l` and flags `flags`.
#[inline]
fn len_of(l: u8, flags: u8) -> usize {
    let has = |bit: u8, n: usize| if l & bit != 0 { n } else { 0 };
    MIN_HDR
        + has(STATUS, 2)
        + has(SEQ16, 2)
        + has(SEQ, 8)
        + has(REMOTE, 16)
        + has(ARG0, 8)
        + has(ARG1, 8)
        + if flags & F_ACK != 0 { 8 } else { 0 }
}

/// Header length of a live-stream frame whose first two bytes are `op`
/// and `flags`; `None` for a byte that names no op.
#[inline]
pub fn data_hdr_len(op: u8, flags: u8) -> Option<usize> {
    let l = layout(op);
    (l & KNOWN != 0).then(|| len_of(l, flags))
}

/// Whether `b` begins with a whole live-stream header (or with a byte that
/// names no op, which [`decode_data`] reports): what a reader at a frame
/// boundary asks before it decodes.
#[inline]
pub fn header_complete(b: &[u8]) -> bool {
    match b {
        [] => false,
        [op] => layout(*op) == 0,
        [op, flags, ..] => data_hdr_len(*op, *flags).is_none_or(|n| b.len() >= n),
    }
}

/// Decodes the next live-stream header from `b`: `Ok(None)` while `b` holds
/// less than the whole header. `expect` is the sequence number the next
/// request should have (the wire carries its low 16 bits: a request's
/// `seq` is `expect` with those bits, so a frame lost or repeated on the
/// way shows as a sequence `expect` did not expect); `last_ack` the last
/// ack the stream carried, updated when this frame carries one. Returns
/// the header (its `ack` the last one where it carries none) and its length
/// in bytes. Validation beyond the op is [`Header::validate`]'s.
///
/// # Errors
/// [`WireError::BadOp`] when the op byte names no op (the header's length
/// is then unknown).
#[inline]
pub fn decode_data(
    b: &[u8],
    expect: u64,
    last_ack: &mut u64,
) -> Result<Option<(Header, usize)>, WireError> {
    let Some(&op) = b.first() else { return Ok(None) };
    let l = layout(op);
    if l & KNOWN == 0 {
        return Err(WireError::BadOp(op));
    }
    if b.len() < MIN_HDR {
        return Ok(None);
    }
    let flags = b[1];
    let n = len_of(l, flags);
    let Some(b) = b.get(..n) else { return Ok(None) };
    let mut at = MIN_HDR;
    let mut take = |k: usize| {
        let mut v = [0u8; 8];
        v[..k].copy_from_slice(&b[at..at + k]);
        at += k;
        u64::from_le_bytes(v)
    };
    let mut h = Header {
        op,
        flags: flags & !F_ACK,
        len: u32::from_le_bytes([b[2], b[3], b[4], b[5]]),
        ..Header::default()
    };
    if l & STATUS != 0 {
        h.status = take(2) as u16;
    }
    if l & SEQ16 != 0 {
        h.seq = expect & !0xffff | take(2);
    }
    if l & SEQ != 0 {
        h.seq = take(8);
    }
    h.ack = if flags & F_ACK != 0 { take(8) } else { *last_ack };
    if l & REMOTE != 0 {
        h.key = take(8);
        h.addr = take(8);
    }
    if l & ARG0 != 0 {
        h.arg0 = take(8);
    }
    if l & ARG1 != 0 {
        h.arg1 = take(8);
    }
    *last_ack = h.ack;
    Ok(Some((h, n)))
}

/// One direction of a live stream as a reader that sees all of it keeps
/// it (a test's peer, a proxy): the request count and the last ack, for
/// [`decode_data`].
#[derive(Clone, Copy, Debug)]
pub struct StreamState {
    /// The sequence number the next request should have.
    pub expect: u64,
    /// The last ack the stream carried.
    pub last_ack: u64,
}

impl Default for StreamState {
    fn default() -> Self {
        StreamState { expect: 1, last_ack: 0 }
    }
}

impl StreamState {
    /// [`decode_data`] at this point of the stream, moving past the header
    /// (a request counts whatever sequence it carries).
    ///
    /// # Errors
    /// As [`decode_data`].
    pub fn decode(&mut self, b: &[u8]) -> Result<Option<(Header, usize)>, WireError> {
        let r = decode_data(b, self.expect, &mut self.last_ack)?;
        if let Some((h, _)) = &r {
            if Op::from_u8(h.op).is_some_and(Op::is_request) {
                self.expect += 1;
            }
        }
        Ok(r)
    }
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Operation (raw byte; see [`Header::op`]).
    pub op: u8,
    /// `F_*` flags.
    pub flags: u8,
    /// Completion status code for NAKs.
    pub status: u16,
    /// Payload length.
    pub len: u32,
    /// Sequence number.
    pub seq: u64,
    /// Cumulative ack.
    pub ack: u64,
    /// Remote key.
    pub key: u64,
    /// Remote address.
    pub addr: u64,
    /// First argument.
    pub arg0: u64,
    /// Second argument.
    pub arg1: u64,
}

/// Why a header is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Unknown op byte.
    BadOp(u8),
    /// A payload on an op that takes none, or one over [`MAX_PAYLOAD`].
    BadLength {
        /// The op.
        op: u8,
        /// The length it claimed.
        len: u32,
    },
    /// A connection request with the wrong magic or an oversized private data.
    BadHandshake,
    /// A connection request from a build that speaks another version of
    /// this protocol (the version it speaks; this build speaks
    /// [`VERSION`]).
    Version(u8),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::BadOp(o) => write!(f, "unknown frame op {o}"),
            WireError::BadLength { op, len } => write!(f, "frame op {op} with bad length {len}"),
            WireError::BadHandshake => write!(f, "bad connection handshake"),
            WireError::Version(v) => write!(
                f,
                "a connection request in rmr's tcp protocol version {v}; this build speaks version {VERSION}"
            ),
        }
    }
}

impl Header {
    /// A header for `op`.
    pub fn new(op: Op) -> Header {
        Header { op: op as u8, ..Header::default() }
    }

    /// Encodes into 56 bytes (the handshake's header).
    pub fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0] = self.op;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.status.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        for (i, v) in
            [self.seq, self.ack, self.key, self.addr, self.arg0, self.arg1].into_iter().enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Encodes a live-stream frame's header into `out`, returning its
    /// length: the fields its op uses (see the module docs), the ack when
    /// it differs from `last_ack` (the last one this side put on the
    /// stream, updated) or the op is an ack or disconnect. Of a request's
    /// `seq` only the low 16 bits go: its place among the stream's
    /// requests says the rest.
    /// `op` must be an op ([`Header::new`] makes such headers).
    #[inline]
    pub fn encode_data(&self, last_ack: &mut u64, out: &mut [u8; HDR]) -> usize {
        let l = layout(self.op);
        assert!(l & KNOWN != 0, "a header made from an op");
        let forced = self.op == Op::Ack as u8 || self.op == Op::Disconnect as u8;
        let ack = self.ack != *last_ack || forced;
        out[0] = self.op;
        out[1] = (self.flags & !F_ACK) | if ack { F_ACK } else { 0 };
        out[2..6].copy_from_slice(&self.len.to_le_bytes());
        let mut at = MIN_HDR;
        let mut put = |v: u64, k: usize| {
            out[at..at + k].copy_from_slice(&v.to_le_bytes()[..k]);
            at += k;
        };
        if l & STATUS != 0 {
            put(u64::from(self.status), 2);
        }
        if l & SEQ16 != 0 {
            put(self.seq, 2);
        }
        if l & SEQ != 0 {
            put(self.seq, 8);
        }
        if ack {
            put(self.ack, 8);
            *last_ack = self.ack;
        }
        if l & REMOTE != 0 {
            put(self.key, 8);
            put(self.addr, 8);
        }
        if l & ARG0 != 0 {
            put(self.arg0, 8);
        }
        if l & ARG1 != 0 {
            put(self.arg1, 8);
        }
        at
    }

    /// [`Header::encode_data`] as a sender that keeps no ack state would
    /// (the ack always carried), header bytes then `payload`: for tools
    /// and tests that write frames by hand.
    pub fn data_frame(&self, payload: &[u8]) -> Vec<u8> {
        let mut out = [0u8; HDR];
        let mut last = !self.ack;
        let n = self.encode_data(&mut last, &mut out);
        [&out[..n], payload].concat()
    }

    /// Decodes 56 bytes (no validation beyond layout; see [`Header::validate`]).
    pub fn decode(b: &[u8; HDR]) -> Header {
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Header {
            op: b[0],
            flags: b[1],
            status: u16::from_le_bytes([b[2], b[3]]),
            len: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            seq: u(8),
            ack: u(16),
            key: u(24),
            addr: u(32),
            arg0: u(40),
            arg1: u(48),
        }
    }

    /// Checks the op and that the payload length fits the op.
    ///
    /// # Errors
    /// [`WireError`] describing the first problem.
    pub fn validate(&self) -> Result<Op, WireError> {
        let op = Op::from_u8(self.op).ok_or(WireError::BadOp(self.op))?;
        let bad = WireError::BadLength { op: self.op, len: self.len };
        if self.len > 0 && !op.may_have_payload() {
            return Err(bad);
        }
        if u64::from(self.len) > MAX_PAYLOAD {
            return Err(bad);
        }
        if matches!(op, Op::ConnReq | Op::ConnAccept | Op::ConnReject)
            && self.len as usize > MAX_PRIVATE
        {
            return Err(bad);
        }
        if op == Op::ConnReq && self.arg0 != MAGIC {
            return Err(if self.arg0 >> 8 == MAGIC >> 8 {
                WireError::Version(self.arg0 as u8)
            } else {
                WireError::BadHandshake
            });
        }
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_every_field() {
        let h = Header {
            op: Op::CmpSwap as u8,
            flags: F_ACK_REQ | F_SOLICITED,
            status: 3,
            len: 0,
            seq: 1,
            ack: u64::MAX,
            key: 0x1234_5678_9abc_def0,
            addr: 42,
            arg0: 7,
            arg1: 9,
        };
        assert_eq!(Header::decode(&h.encode()), h);
        assert_eq!(h.validate(), Ok(Op::CmpSwap));
    }

    #[test]
    fn rejects_bad_frames() {
        let mut h = Header::new(Op::Ack);
        h.len = 5;
        assert!(matches!(h.validate(), Err(WireError::BadLength { .. })));
        assert_eq!(Header { op: 0, ..h }.validate(), Err(WireError::BadOp(0)));
        assert_eq!(Header { op: 200, ..h }.validate(), Err(WireError::BadOp(200)));
        let mut w = Header::new(Op::Write);
        w.len = (MAX_PAYLOAD + 1) as u32;
        assert!(w.validate().is_err());
        let mut c = Header::new(Op::ConnReq);
        c.arg0 = MAGIC;
        c.len = (MAX_PRIVATE + 1) as u32;
        assert!(c.validate().is_err());
        c.len = 0;
        c.arg0 = 1;
        assert_eq!(c.validate(), Err(WireError::BadHandshake));
        // The first version's request: told apart from noise.
        c.arg0 = 0x524d_5201;
        assert_eq!(c.validate(), Err(WireError::Version(1)));
        assert!(WireError::Version(1).to_string().contains("version 1"));
    }

    /// Every op's live-stream header decodes to what was encoded (a
    /// request's seq from the count, the fields its op does not carry
    /// zero), at the length its op says.
    #[test]
    fn data_roundtrip_every_op() {
        use Op::*;
        let ops = [
            (Send, 8),
            (Write, 24),
            (WriteImm, 32),
            (ReadReq, 32),
            (ReadResp, 14),
            (FetchAdd, 32),
            (CmpSwap, 40),
            (AtomicResp, 22),
            (Ack, 14),
            (Nak, 16),
            (Disconnect, 14),
        ];
        for (op, len) in ops {
            let l = layout(op as u8);
            assert_eq!(l & SEQ16 != 0, op.is_request(), "{op:?}");
            let mut h = Header::new(op);
            h.flags = F_ACK_REQ | F_SOLICITED;
            h.len = if op.may_have_payload() { 77 } else { 0 };
            h.seq = if op.is_request() {
                5
            } else if l & SEQ != 0 {
                3
            } else {
                0
            };
            h.status = if l & STATUS != 0 { 9 } else { 0 };
            h.ack = 17;
            if l & REMOTE != 0 {
                (h.key, h.addr) = (0x1234_5678_9abc_def0, 4096);
            }
            h.arg0 = if l & ARG0 != 0 { u64::MAX } else { 0 };
            h.arg1 = if l & ARG1 != 0 { 2 } else { 0 };
            // The ack is no news (17 went out last), except where forced.
            let mut out = [0u8; HDR];
            let mut sent = 17;
            let n = h.encode_data(&mut sent, &mut out);
            assert_eq!(n, len, "{op:?}");
            let mut seen = 17;
            let (d, m) = decode_data(&out[..n], 5, &mut seen).unwrap().unwrap();
            assert_eq!((d, m), (h, n), "{op:?}");
            // News: 8 bytes more, and the receiver's last ack moves.
            let mut sent = 16;
            let n2 = h.encode_data(&mut sent, &mut out);
            assert_eq!(n2, if matches!(op, Ack | Disconnect) { len } else { len + 8 }, "{op:?}");
            assert_eq!(sent, 17);
            let mut seen = 16;
            assert_eq!(decode_data(&out[..n2], 5, &mut seen), Ok(Some((h, n2))), "{op:?}");
            assert_eq!(seen, 17);
            // Any shorter prefix is not a header yet, and moves nothing.
            for k in 0..n2 {
                let mut seen = 16;
                assert_eq!(decode_data(&out[..k], 5, &mut seen), Ok(None), "{op:?} {k}");
                assert_eq!(seen, 16);
                assert!(!header_complete(&out[..k]), "{op:?} {k}");
            }
            assert!(header_complete(&out[..n2]));
        }
    }

    /// A stream of frames as a ping-pong sends them: requests numbered by
    /// their place, the ack carried once per change. An 8-byte write and
    /// its notify take 48 bytes with an ack, 40 without.
    #[test]
    fn data_stream_counts_requests_and_repeats_acks() {
        let mut wire = Vec::new();
        let mut sent = 0;
        let mut out = [0u8; HDR];
        let mut frames = Vec::new();
        for round in 0..3u64 {
            let mut w = Header::new(Op::Write);
            (w.key, w.addr, w.len, w.seq, w.ack) = (7, 64, 8, 2 * round + 1, round);
            let mut s = Header::new(Op::Send);
            (s.seq, s.ack) = (2 * round + 2, round);
            let before = wire.len();
            for h in [w, s] {
                let n = h.encode_data(&mut sent, &mut out);
                wire.extend_from_slice(&out[..n]);
                if h.op == Op::Write as u8 {
                    wire.extend_from_slice(&[0xab; 8]);
                }
                frames.push(h);
            }
            assert_eq!(wire.len() - before, if round == 0 { 40 } else { 48 });
        }
        let (mut at, mut st) = (0, StreamState::default());
        let mut starts = Vec::new();
        for want in &frames {
            starts.push(at);
            let (h, n) = st.decode(&wire[at..]).unwrap().unwrap();
            assert_eq!(&h, want);
            at += n + h.len as usize;
        }
        assert_eq!(at, wire.len());
        // A request lost on the way: the next one has a sequence number
        // the receiver did not expect (the reader ends the stream on it).
        let mut st = StreamState::default();
        let (h, _) = st.decode(&wire[starts[1]..]).unwrap().unwrap();
        assert_eq!((h.seq, st.expect), (2, 2));
        // Sequence numbers past 16 bits take the count's high bits.
        let mut s = Header::new(Op::Send);
        s.seq = 0x3_0001;
        let b = s.data_frame(&[]);
        let mut ack = 0;
        assert_eq!(decode_data(&b, 0x3_0001, &mut ack).unwrap().unwrap().0.seq, 0x3_0001);
        assert_eq!(decode_data(&b, 0x3_0002, &mut ack).unwrap().unwrap().0.seq, 0x3_0001);
    }

    #[test]
    fn data_rejects_unknown_op() {
        let mut ack = 3;
        assert_eq!(decode_data(&[0], 1, &mut ack), Err(WireError::BadOp(0)));
        assert_eq!(decode_data(&[200, 0, 0], 1, &mut ack), Err(WireError::BadOp(200)));
        assert_eq!(decode_data(&[], 1, &mut ack), Ok(None));
        assert_eq!(ack, 3);
        // A reader at a frame boundary goes on to report it.
        assert!(header_complete(&[0]) && header_complete(&[200, 0]));
    }
}
