//! The frame format of the shared rings: a 64-byte header (one cache
//! line) and a payload padded to 64 bytes. A DTO's payload larger than a
//! frame's share of the ring goes as its first frame and `Cont` frames
//! right behind it (one producer per ring, so they are never interleaved).

/// Every frame is this long at least, and a multiple of it.
pub const HDR: usize = 64;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Fills the end of the ring; the next frame starts at its beginning.
    Pad = 0,
    /// A message for the peer's next posted receive: `total` bytes.
    Send = 1,
    /// More payload of the frame before.
    Cont = 2,
    /// `total` bytes for `addr` in the region of `key` (`flags & IMM`: and
    /// a receive completion with `arg` as the immediate).
    Write = 3,
    /// Asks for `total` bytes at `addr` in the region of `key`.
    ReadReq = 4,
    /// The answer to `ReadReq` `seq`: `total` bytes, or `status`.
    ReadResp = 5,
    /// Fetch-and-add `arg` to the word at `addr` in the region of `key`.
    FetchAdd = 6,
    /// Compare the word with `arg` and swap in `arg2` when equal.
    CmpSwap = 7,
    /// The answer to an atomic `seq`: the old value in `arg`, or `status`.
    AtomicResp = 8,
    /// Every request up to and including `seq` that no other frame
    /// answered succeeded.
    AckUpTo = 9,
    /// Request `seq` failed with `status`.
    Nack = 10,
    /// The peer disconnected: nothing follows.
    Disconnect = 11,
}

impl Op {
    /// The op of a wire byte.
    pub fn from_u8(b: u8) -> Option<Op> {
        use Op::*;
        [
            Pad, Send, Cont, Write, ReadReq, ReadResp, FetchAdd, CmpSwap, AtomicResp, AckUpTo,
            Nack, Disconnect,
        ]
        .get(b as usize)
        .copied()
    }
}

/// `flags`: the send was solicited.
pub const SOLICITED: u8 = 1;
/// `flags`: a write with immediate.
pub const IMM: u8 = 2;

/// A frame header as its fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hdr {
    /// [`Op`] as a byte.
    pub op: u8,
    /// [`SOLICITED`], [`IMM`].
    pub flags: u8,
    /// A [`rmr_api::Status`] code (answers).
    pub status: u16,
    /// Payload bytes in this frame.
    pub len: u32,
    /// The request's sequence number on its ring.
    pub seq: u64,
    /// The request's whole payload (over this frame and its `Cont`s).
    pub total: u64,
    /// The target region's key.
    pub key: u64,
    /// The target address.
    pub addr: u64,
    /// Immediate, addend, compare value or old value.
    pub arg: u64,
    /// Swap value.
    pub arg2: u64,
}

impl Hdr {
    /// A header of `op` with every other field zero.
    pub fn new(op: Op) -> Hdr {
        Hdr { op: op as u8, ..Hdr::default() }
    }

    /// The header as its eight little-endian words.
    pub fn to_words(&self) -> [u64; 8] {
        [
            u64::from(self.op)
                | u64::from(self.flags) << 8
                | u64::from(self.status) << 16
                | u64::from(self.len) << 32,
            self.seq,
            self.total,
            self.key,
            self.addr,
            self.arg,
            self.arg2,
            0,
        ]
    }

    /// The header of eight words (any values: the parser checks them).
    pub fn from_words(w: [u64; 8]) -> Hdr {
        Hdr {
            op: w[0] as u8,
            flags: (w[0] >> 8) as u8,
            status: (w[0] >> 16) as u16,
            len: (w[0] >> 32) as u32,
            seq: w[1],
            total: w[2],
            key: w[3],
            addr: w[4],
            arg: w[5],
            arg2: w[6],
        }
    }
}

/// The ring bytes a frame with `len` payload bytes takes.
pub fn frame_size(len: usize) -> usize {
    HDR + len.div_ceil(HDR) * HDR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = Hdr {
            op: Op::CmpSwap as u8,
            flags: IMM | SOLICITED,
            status: 7,
            len: 0xdead_beef,
            seq: 1,
            total: 2,
            key: u64::MAX,
            addr: 4,
            arg: 5,
            arg2: 6,
        };
        assert_eq!(Hdr::from_words(h.to_words()), h);
        assert_eq!(Op::from_u8(Op::Disconnect as u8), Some(Op::Disconnect));
        assert_eq!(Op::from_u8(12), None);
        assert_eq!(frame_size(0), 64);
        assert_eq!(frame_size(1), 128);
        assert_eq!(frame_size(64), 128);
    }
}
