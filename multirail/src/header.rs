//! The multirail connection header: what each rail's connection carries
//! ahead of the user's private data, so the listener can group a
//! connector's rail connections into one request (session id, rail index,
//! rail count).

/// Bytes of each rail's connection private data the multirail header takes.
pub(crate) const MR_HDR: usize = 14;

pub(crate) const MAGIC: &[u8; 4] = b"MRL1";

/// Encodes the per-rail header of a connection's private data.
pub(crate) fn header(session: u64, idx: usize, n: usize) -> [u8; MR_HDR] {
    let mut h = [0u8; MR_HDR];
    h[..4].copy_from_slice(MAGIC);
    h[4..12].copy_from_slice(&session.to_le_bytes());
    h[12] = idx as u8;
    h[13] = n as u8;
    h
}

/// Decodes it: (session, rail index, rail count, user private data).
pub(crate) fn parse_header(pd: &[u8]) -> Option<(u64, usize, usize, &[u8])> {
    if pd.len() < MR_HDR || &pd[..4] != MAGIC {
        return None;
    }
    let session = u64::from_le_bytes(pd[4..12].try_into().ok()?);
    Some((session, pd[12] as usize, pd[13] as usize, &pd[MR_HDR..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_foreign_data_refused() {
        let mut pd = header(0x0123_4567_89ab_cdef, 2, 3).to_vec();
        pd.extend_from_slice(b"user");
        assert_eq!(parse_header(&pd), Some((0x0123_4567_89ab_cdef, 2, 3, &b"user"[..])));
        assert_eq!(parse_header(b"MRL1 too short"[..10].as_ref()), None);
        pd[0] = b'X';
        assert_eq!(parse_header(&pd), None, "not a multirail header");
    }
}
