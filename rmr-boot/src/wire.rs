//! The rendezvous protocol's messages and their encoding (no IO: the
//! rendezvous code reads and writes whole frames, this module only turns
//! them into bytes and back, so it is tested on its own).
//!
//! A frame is `u32 length (LE, of what follows) | u8 kind | body`.
//!
//! | kind | message | body |
//! | --- | --- | --- |
//! | 6 | `Challenge` (root -> rank, first) | the root's nonce (32 bytes) |
//! | 1 | `Hello` (rank -> root) | magic `RMRB` u32, version u16, rank u32, size u32, node name (u16 len + bytes), the rank's nonce (32), its proof (32) |
//! | 2 | `Welcome` (root -> rank) | job id u64, count u32, every rank's node name (u16 len + bytes), the root's proof (32) |
//! | 3 | `Gather` (rank -> root) | sequence u64, the rank's bytes |
//! | 4 | `Gathered` (root -> rank) | sequence u64, count u32, every rank's bytes (u32 len + bytes) |
//! | 5 | `Abort` (root -> rank) | why, UTF-8 |

use crate::{Error, Result};

/// `RMRB`.
pub(crate) const MAGIC: u32 = 0x524d_5242;
/// Protocol version (2: the job secret's challenge and proofs).
pub(crate) const VERSION: u16 = 2;
/// Largest frame accepted (a defence against a stray peer, not a limit users meet).
pub(crate) const MAX_FRAME: usize = 256 << 20;

/// One protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    Challenge { nonce: [u8; 32] },
    Hello { rank: u32, size: u32, node: String, nonce: [u8; 32], proof: [u8; 32] },
    Welcome { job: u64, nodes: Vec<String>, proof: [u8; 32] },
    Gather { seq: u64, data: Vec<u8> },
    Gathered { seq: u64, all: Vec<Vec<u8>> },
    Abort(String),
}

fn put_str16(b: &mut Vec<u8>, s: &str) {
    let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.extend_from_slice(&(s.len() as u16).to_le_bytes());
    b.extend_from_slice(s);
}

impl Msg {
    /// The whole frame, length prefix included.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        match self {
            Msg::Challenge { nonce } => {
                b.push(6);
                b.extend_from_slice(nonce);
            }
            Msg::Hello { rank, size, node, nonce, proof } => {
                b.push(1);
                b.extend_from_slice(&MAGIC.to_le_bytes());
                b.extend_from_slice(&VERSION.to_le_bytes());
                b.extend_from_slice(&rank.to_le_bytes());
                b.extend_from_slice(&size.to_le_bytes());
                put_str16(&mut b, node);
                b.extend_from_slice(nonce);
                b.extend_from_slice(proof);
            }
            Msg::Welcome { job, nodes, proof } => {
                b.push(2);
                b.extend_from_slice(&job.to_le_bytes());
                b.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
                for n in nodes {
                    put_str16(&mut b, n);
                }
                b.extend_from_slice(proof);
            }
            Msg::Gather { seq, data } => {
                b.push(3);
                b.extend_from_slice(&seq.to_le_bytes());
                b.extend_from_slice(data);
            }
            Msg::Gathered { seq, all } => {
                b.push(4);
                b.extend_from_slice(&seq.to_le_bytes());
                b.extend_from_slice(&(all.len() as u32).to_le_bytes());
                for d in all {
                    b.extend_from_slice(&(d.len() as u32).to_le_bytes());
                    b.extend_from_slice(d);
                }
            }
            Msg::Abort(why) => {
                b.push(5);
                b.extend_from_slice(why.as_bytes());
            }
        }
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_le_bytes());
        b
    }

    /// Decodes a frame body (what follows the length prefix).
    pub(crate) fn decode(body: &[u8]) -> Result<Msg> {
        let mut r = Reader { b: body, at: 0 };
        let kind = r.u8()?;
        let m = match kind {
            1 => {
                let magic = r.u32()?;
                if magic != MAGIC {
                    return Err(Error::Protocol(format!(
                        "not an rmr rendezvous peer (magic {magic:#x})"
                    )));
                }
                let v = r.u16()?;
                if v != VERSION {
                    return Err(Error::Protocol(format!(
                        "rendezvous protocol version {v}, this build speaks {VERSION}"
                    )));
                }
                let (rank, size, node) = (r.u32()?, r.u32()?, r.str16()?);
                Msg::Hello { rank, size, node, nonce: r.b32()?, proof: r.b32()? }
            }
            6 => Msg::Challenge { nonce: r.b32()? },
            2 => {
                let job = r.u64()?;
                let n = r.u32()? as usize;
                let mut nodes = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    nodes.push(r.str16()?);
                }
                Msg::Welcome { job, nodes, proof: r.b32()? }
            }
            3 => Msg::Gather { seq: r.u64()?, data: r.rest().to_vec() },
            4 => {
                let seq = r.u64()?;
                let n = r.u32()? as usize;
                let mut all = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    let len = r.u32()? as usize;
                    all.push(r.take(len)?.to_vec());
                }
                Msg::Gathered { seq, all }
            }
            5 => Msg::Abort(String::from_utf8_lossy(r.rest()).into_owned()),
            k => return Err(Error::Protocol(format!("unknown message kind {k}"))),
        };
        if !r.rest().is_empty() && !matches!(m, Msg::Gather { .. } | Msg::Abort(_)) {
            return Err(Error::Protocol("trailing bytes after a message".into()));
        }
        Ok(m)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self.at.checked_add(n) {
            Some(end) if end <= self.b.len() => {
                let s = &self.b[self.at..end];
                self.at = end;
                Ok(s)
            }
            _ => Err(Error::Protocol("truncated message".into())),
        }
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn b32(&mut self) -> Result<[u8; 32]> {
        Ok(self.take(32)?.try_into().expect("32 bytes"))
    }
    fn str16(&mut self) -> Result<String> {
        let n = self.u16()? as usize;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(m: &Msg) -> Msg {
        let f = m.encode();
        let len = u32::from_le_bytes(f[..4].try_into().unwrap()) as usize;
        assert_eq!(len, f.len() - 4);
        Msg::decode(&f[4..]).unwrap()
    }

    #[test]
    fn every_kind_roundtrips() {
        for m in [
            Msg::Challenge { nonce: [7; 32] },
            Msg::Hello { rank: 3, size: 17, node: "n1".into(), nonce: [1; 32], proof: [2; 32] },
            Msg::Welcome { job: 42, nodes: vec!["a".into(), "".into()], proof: [3; 32] },
            Msg::Gather { seq: 9, data: vec![] },
            Msg::Gathered { seq: 9, all: vec![vec![1, 2], vec![], vec![3]] },
            Msg::Abort("rank 4 missing".into()),
        ] {
            assert_eq!(roundtrip(&m), m);
        }
    }

    #[test]
    fn strangers_and_garbage_are_protocol_errors() {
        // An HTTP client at the root port.
        assert!(matches!(Msg::decode(b"\x01GET / HTTP/1.1"), Err(Error::Protocol(_))));
        assert!(matches!(Msg::decode(&[9]), Err(Error::Protocol(_))));
        assert!(matches!(Msg::decode(&[]), Err(Error::Protocol(_))));
        let mut f =
            Msg::Hello { rank: 1, size: 2, node: "x".into(), nonce: [0; 32], proof: [0; 32] }
                .encode();
        f[9] = 7; // version
        assert!(Msg::decode(&f[4..]).unwrap_err().to_string().contains("version"));
    }

    proptest! {
        #[test]
        fn gathered_roundtrips(seq in any::<u64>(), all in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..40), 0..20)) {
            let m = Msg::Gathered { seq, all };
            prop_assert_eq!(roundtrip(&m), m);
        }

        #[test]
        fn truncation_never_panics(cut in 0usize..60, node in "[a-z]{0,12}") {
            let f = Msg::Welcome { job: 1, nodes: vec![node.clone(), node], proof: [9; 32] }.encode();
            let body = &f[4..];
            let cut = cut.min(body.len());
            if cut < body.len() {
                prop_assert!(Msg::decode(&body[..cut]).is_err());
            }
        }
    }
}
