//! The multirail connection header: what each rail's connection carries
//! ahead of the user's private data, so the listener can group a
//! connector's rail connections into one request (session id, rail index,
//! rail count); and the two headers of a rail's rejoin: the key the
//! accepting side hands out on rails 1.. (`MRK1`), and the rejoin request
//! (`MRR1`) that proves it knows that key, and the same for a notice of
//! the connecting side's new control rail (`MRC1`).

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

/// The accepting side's answer on rails 1..: the key a rejoin must prove.
pub(crate) const KEY_MAGIC: &[u8; 4] = b"MRK1";
/// Bytes of the rejoin key.
pub(crate) const KEY_LEN: usize = 16;

/// The accept answer carrying the rejoin key.
pub(crate) fn key_pd(key: &[u8; KEY_LEN]) -> Vec<u8> {
    [&KEY_MAGIC[..], key].concat()
}

/// The rejoin key in an accept answer (none: the peer does not rejoin).
pub(crate) fn parse_key(pd: &[u8]) -> Option<[u8; KEY_LEN]> {
    (pd.len() == 4 + KEY_LEN && &pd[..4] == KEY_MAGIC).then(|| pd[4..].try_into().ok())?
}

/// The magic of a rejoin request.
pub(crate) const REJOIN_MAGIC: &[u8; 4] = b"MRR1";
/// The magic of a control-rail notice (same layout; `rail` is the new
/// control rail).
pub(crate) const CONTROL_MAGIC: &[u8; 4] = b"MRC1";
/// Bytes of a rejoin request: magic, session, rail, rail count, attempt, MAC.
pub(crate) const REJOIN_LEN: usize = 4 + 8 + 1 + 1 + 4 + 16;

/// A rejoin request's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rejoin {
    /// A control-rail notice (`MRC1`), not a rejoin (`MRR1`).
    pub(crate) control: bool,
    pub(crate) session: u64,
    pub(crate) rail: usize,
    pub(crate) rails: usize,
    /// Grows with every attempt of one endpoint (a replayed request is refused).
    pub(crate) attempt: u32,
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn rejoin_mac(key: &[u8; KEY_LEN], r: &Rejoin) -> HmacSha256 {
    use hmac::Mac;
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(if r.control { b"rmr-mr-control" } else { b"rmr-mr-rejoin" });
    m.update(&r.session.to_le_bytes());
    m.update(&[r.rail as u8, r.rails as u8]);
    m.update(&r.attempt.to_le_bytes());
    m
}

/// Encodes a rejoin request, signed with the session's key.
pub(crate) fn rejoin_header(key: &[u8; KEY_LEN], r: &Rejoin) -> [u8; REJOIN_LEN] {
    use hmac::Mac;
    let mut h = [0u8; REJOIN_LEN];
    h[..4].copy_from_slice(if r.control { CONTROL_MAGIC } else { REJOIN_MAGIC });
    h[4..12].copy_from_slice(&r.session.to_le_bytes());
    h[12] = r.rail as u8;
    h[13] = r.rails as u8;
    h[14..18].copy_from_slice(&r.attempt.to_le_bytes());
    h[18..].copy_from_slice(&rejoin_mac(key, r).finalize().into_bytes()[..16]);
    h
}

/// Decodes a rejoin request (not yet its MAC: see [`rejoin_verify`]).
pub(crate) fn parse_rejoin(pd: &[u8]) -> Option<(Rejoin, [u8; 16])> {
    if pd.len() != REJOIN_LEN || (&pd[..4] != REJOIN_MAGIC && &pd[..4] != CONTROL_MAGIC) {
        return None;
    }
    let r = Rejoin {
        control: &pd[..4] == CONTROL_MAGIC,
        session: u64::from_le_bytes(pd[4..12].try_into().ok()?),
        rail: pd[12] as usize,
        rails: pd[13] as usize,
        attempt: u32::from_le_bytes(pd[14..18].try_into().ok()?),
    };
    Some((r, pd[18..].try_into().ok()?))
}

/// Whether `mac` proves the key for `r` (compared in constant time).
pub(crate) fn rejoin_verify(key: &[u8; KEY_LEN], r: &Rejoin, mac: &[u8; 16]) -> bool {
    use hmac::Mac;
    rejoin_mac(key, r).verify_truncated_left(mac).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejoin_request_round_trip_and_forgeries_refused() {
        let key = [7u8; KEY_LEN];
        let r = Rejoin { control: false, session: 0xfeed_beef, rail: 1, rails: 2, attempt: 3 };
        let h = rejoin_header(&key, &r);
        let (got, mac) = parse_rejoin(&h).expect("parses");
        assert_eq!(got, r);
        assert!(rejoin_verify(&key, &got, &mac));
        assert!(!rejoin_verify(&[8u8; KEY_LEN], &got, &mac), "another key");
        for (i, field) in
            [(4, "session"), (12, "rail"), (13, "count"), (14, "attempt"), (20, "mac")]
        {
            let mut bad = h;
            bad[i] ^= 1;
            let (b, m) = parse_rejoin(&bad).expect("parses");
            assert!(!rejoin_verify(&key, &b, &m), "a changed {field} is refused");
        }
        assert_eq!(parse_rejoin(&h[..REJOIN_LEN - 1]), None);
        // A notice is signed apart: a rejoin's MAC does not make one.
        let mut notice = h;
        notice[..4].copy_from_slice(CONTROL_MAGIC);
        let (n, m) = parse_rejoin(&notice).expect("parses");
        assert!(n.control);
        assert!(!rejoin_verify(&key, &n, &m), "a rejoin's MAC on a notice");
        let c = Rejoin { control: true, ..r };
        let (n, m) = parse_rejoin(&rejoin_header(&key, &c)).expect("parses");
        assert_eq!(n, c);
        assert!(rejoin_verify(&key, &n, &m));
        assert_eq!(parse_header(&h), None, "not a connection header");
        assert_eq!(parse_key(&key_pd(&key)), Some(key));
        assert_eq!(parse_key(b"MRK1short"), None);
        assert_eq!(parse_key(&[]), None);
    }

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
