//! Connection private data of the bridge protocol.
//!
//! - client → bridge (`ZPC1`): the client's ring, its chunk cap, and the
//!   target (address, service) on the bridge's other side;
//! - bridge → target (`ZPB1`): the bridge's ring toward the target, the
//!   chunk proposed so far and who is calling;
//! - target → bridge and bridge → client (`ZPR1`): the answering end's
//!   ring and the final chunk size.
//!
//! The user's own private data follows each header unchanged.

use crate::credit::CreditConfig;

/// Bytes of the fixed part of each header.
pub(crate) const FIXED: usize = 4 + 2 + 2 + 4;

fn ring_bytes(tag: &[u8; 4], ring: CreditConfig, chunk: u32) -> Vec<u8> {
    let mut v = tag.to_vec();
    v.extend_from_slice(&ring.data.to_le_bytes());
    v.extend_from_slice(&ring.ctl.to_le_bytes());
    v.extend_from_slice(&chunk.to_le_bytes());
    v
}

fn parse_ring<'a>(tag: &[u8; 4], b: &'a [u8]) -> Option<(CreditConfig, u32, &'a [u8])> {
    if b.len() < FIXED || &b[..4] != tag {
        return None;
    }
    let data = u16::from_le_bytes([b[4], b[5]]);
    let ctl = u16::from_le_bytes([b[6], b[7]]);
    let chunk = u32::from_le_bytes(b[8..12].try_into().ok()?);
    if data == 0 || ctl < 3 || chunk == 0 {
        return None;
    }
    let mut cfg = CreditConfig::for_ring(data);
    cfg.ctl = ctl;
    Some((cfg, chunk, &b[FIXED..]))
}

/// Client → bridge.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClientHello<'a> {
    pub(crate) ring: CreditConfig,
    pub(crate) chunk: u32,
    pub(crate) service: u16,
    pub(crate) target: &'a str,
    pub(crate) user: &'a [u8],
}

impl ClientHello<'_> {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = ring_bytes(b"ZPC1", self.ring, self.chunk);
        v.extend_from_slice(&self.service.to_le_bytes());
        v.push(self.target.len() as u8);
        v.extend_from_slice(self.target.as_bytes());
        v.extend_from_slice(self.user);
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<ClientHello<'_>> {
        let (ring, chunk, rest) = parse_ring(b"ZPC1", b)?;
        if rest.len() < 3 {
            return None;
        }
        let service = u16::from_le_bytes([rest[0], rest[1]]);
        let n = usize::from(rest[2]);
        let target = std::str::from_utf8(rest.get(3..3 + n)?).ok()?;
        Some(ClientHello { ring, chunk, service, target, user: &rest[3 + n..] })
    }
}

/// Bridge → target.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BridgeHello<'a> {
    pub(crate) ring: CreditConfig,
    pub(crate) chunk: u32,
    pub(crate) from: &'a str,
    pub(crate) user: &'a [u8],
}

impl BridgeHello<'_> {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = ring_bytes(b"ZPB1", self.ring, self.chunk);
        v.push(self.from.len() as u8);
        v.extend_from_slice(self.from.as_bytes());
        v.extend_from_slice(self.user);
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<BridgeHello<'_>> {
        let (ring, chunk, rest) = parse_ring(b"ZPB1", b)?;
        let n = usize::from(*rest.first()?);
        let from = std::str::from_utf8(rest.get(1..1 + n)?).ok()?;
        Some(BridgeHello { ring, chunk, from, user: &rest[1 + n..] })
    }
}

/// The answer of a target to a bridge, or of a bridge to a client.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reply<'a> {
    pub(crate) ring: CreditConfig,
    pub(crate) chunk: u32,
    pub(crate) user: &'a [u8],
}

impl Reply<'_> {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = ring_bytes(b"ZPR1", self.ring, self.chunk);
        v.extend_from_slice(self.user);
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Reply<'_>> {
        let (ring, chunk, user) = parse_ring(b"ZPR1", b)?;
        Some(Reply { ring, chunk, user })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrips() {
        let ring = CreditConfig::for_ring(16);
        let c = ClientHello { ring, chunk: 65536, service: 7, target: "198.18.20.2", user: b"u" };
        assert_eq!(ClientHello::decode(&c.encode()), Some(c));
        let b = BridgeHello { ring, chunk: 4096, from: "198.18.10.1:5", user: b"" };
        assert_eq!(BridgeHello::decode(&b.encode()), Some(b));
        let r = Reply { ring, chunk: 4096, user: b"ctx" };
        assert_eq!(Reply::decode(&r.encode()), Some(r));
        assert!(Reply::decode(b"ZPR1").is_none());
        assert!(ClientHello::decode(&Reply { ring, chunk: 1, user: b"" }.encode()).is_none());
    }
}
