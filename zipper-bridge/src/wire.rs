//! The bridge protocol's message header: a fixed-size, little-endian
//! record in front of every message between a client and a bridge.
//!
//! Every message carries the sender's returned credits (piggy-backed) and,
//! from a bridge, the cumulative acknowledgement of the client's operations.

use rmr_api::RmrContext;

/// Size of an encoded [`Header`] in bytes (a multiple of 8).
pub const HDR: usize = 144;
const MAGIC: u8 = 0x5a;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Header only: credits, acknowledgements, errors, echo.
    Ctl = 1,
    /// Client → bridge: a chunk of a send, with its payload.
    Send = 2,
    /// Client → bridge: a chunk of an RDMA write, with its payload.
    Write = 3,
    /// Client → bridge: read `len` bytes of the target's `ctx` at `offset`.
    ReadReq = 4,
    /// Bridge → client: a chunk of a send from the peer.
    Deliver = 5,
    /// Bridge → client: a chunk of data answering a [`Kind::ReadReq`].
    ReadData = 6,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Ctl,
            2 => Kind::Send,
            3 => Kind::Write,
            4 => Kind::ReadReq,
            5 => Kind::Deliver,
            6 => Kind::ReadData,
            _ => return None,
        })
    }

    /// True for messages that use the receiver's data pool (everything but [`Kind::Ctl`]).
    pub fn is_data(self) -> bool {
        self != Kind::Ctl
    }
}

/// Header flags.
pub mod flags {
    /// Last chunk of its operation.
    pub const LAST: u8 = 1;
    /// The initiator wants a completion event for the operation.
    pub const SIGNALLED: u8 = 2;
    /// The send was posted with `DtoFlags::SOLICITED`.
    pub const SOLICITED: u8 = 4;
    /// `err_id`/`status` carry an operation's failure.
    pub const ERR: u8 = 8;
    /// Please answer with [`ECHO_REPLY`] at once (the store-and-forward handshake).
    pub const ECHO: u8 = 16;
    /// Answer to [`ECHO`].
    pub const ECHO_REPLY: u8 = 32;
}

/// One message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message kind.
    pub kind: Kind,
    /// [`flags`] bits.
    pub flags: u8,
    /// Data-pool receive buffers the sender re-posted since its last message.
    pub ret_data: u16,
    /// Control-pool receive buffers the sender re-posted since its last message.
    pub ret_ctl: u16,
    /// Bridge → client: every operation with an id below this has completed.
    pub ack: u64,
    /// Operation id (per connection and direction, from 0).
    pub id: u64,
    /// Remote offset (write, read request) or byte offset in the message (send, deliver, read data).
    pub offset: u64,
    /// Payload length (read request: bytes to read).
    pub len: u32,
    /// Status code ([`rmr_api::Status::code`]) of the failed operation `err_id`.
    pub status: u16,
    /// Total bytes of the operation (send, deliver); local offset (read request).
    pub total: u64,
    /// The failed operation, with [`flags::ERR`].
    pub err_id: u64,
    /// The target region (write, read request).
    pub ctx: Option<RmrContext>,
}

impl Header {
    /// A header of `kind` with every field zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            ret_data: 0,
            ret_ctl: 0,
            ack: 0,
            id: 0,
            offset: 0,
            len: 0,
            status: 0,
            total: 0,
            err_id: 0,
            ctx: None,
        }
    }

    /// True when `f` is set.
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Encodes into `HDR` bytes.
    pub fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0] = MAGIC;
        b[1] = self.kind as u8;
        b[2] = self.flags;
        b[4..6].copy_from_slice(&self.ret_data.to_le_bytes());
        b[6..8].copy_from_slice(&self.ret_ctl.to_le_bytes());
        b[8..16].copy_from_slice(&self.ack.to_le_bytes());
        b[16..24].copy_from_slice(&self.id.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..36].copy_from_slice(&self.len.to_le_bytes());
        b[36..38].copy_from_slice(&self.status.to_le_bytes());
        b[40..48].copy_from_slice(&self.total.to_le_bytes());
        b[48..56].copy_from_slice(&self.err_id.to_le_bytes());
        if let Some(c) = self.ctx {
            b[56..56 + RmrContext::WIRE_SIZE].copy_from_slice(&c.to_bytes());
        }
        b
    }

    /// Decodes a header; `None` for a short buffer, a bad magic or an unknown kind.
    pub fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < HDR || b[0] != MAGIC {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"));
        Some(Header {
            kind: Kind::from_u8(b[1])?,
            flags: b[2],
            ret_data: u16_at(4),
            ret_ctl: u16_at(6),
            ack: u64_at(8),
            id: u64_at(16),
            offset: u64_at(24),
            len: u32::from_le_bytes(b[32..36].try_into().expect("4 bytes")),
            status: u16_at(36),
            total: u64_at(40),
            err_id: u64_at(48),
            ctx: RmrContext::from_bytes(&b[56..56 + RmrContext::WIRE_SIZE]).ok(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn roundtrip(kind in 1u8..=6, fl in any::<u8>(), rd in any::<u16>(), rc in any::<u16>(),
                     ack in any::<u64>(), id in any::<u64>(), off in any::<u64>(), len in any::<u32>(),
                     st in any::<u16>(), total in any::<u64>(), err in any::<u64>(),
                     key in any::<u64>(), addr in any::<u64>(), clen in any::<u64>(), with_ctx in any::<bool>()) {
            let h = Header {
                kind: Kind::from_u8(kind).unwrap(), flags: fl, ret_data: rd, ret_ctl: rc, ack, id,
                offset: off, len, status: st, total, err_id: err,
                ctx: with_ctx.then(|| RmrContext::new(key, addr, clen)),
            };
            prop_assert_eq!(Header::decode(&h.encode()), Some(h));
        }

        #[test]
        fn garbage_is_refused_or_decoded_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Header::decode(&b);
        }
    }

    #[test]
    fn bad_magic_and_kind() {
        let mut b = Header::new(Kind::Ctl).encode();
        assert!(Header::decode(&b).is_some());
        b[1] = 99;
        assert!(Header::decode(&b).is_none());
        b[1] = 1;
        b[0] = 0;
        assert!(Header::decode(&b).is_none());
        assert!(Header::decode(&b[..10]).is_none());
    }
}
