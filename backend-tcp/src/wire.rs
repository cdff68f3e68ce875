//! The wire protocol: a fixed 56-byte little-endian header, optionally
//! followed by a payload. Pure functions, no IO: the codec is unit-tested
//! and fuzzed on its own.
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

/// Header size in bytes.
pub const HDR: usize = 56;
/// `arg0` of a connection request: "RMR" + protocol version 1.
pub const MAGIC: u64 = 0x524d_5201;
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
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::BadOp(o) => write!(f, "unknown frame op {o}"),
            WireError::BadLength { op, len } => write!(f, "frame op {op} with bad length {len}"),
            WireError::BadHandshake => write!(f, "bad connection handshake"),
        }
    }
}

impl Header {
    /// A header for `op`.
    pub fn new(op: Op) -> Header {
        Header { op: op as u8, ..Header::default() }
    }

    /// Encodes into 56 bytes.
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
            return Err(WireError::BadHandshake);
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
    }
}
