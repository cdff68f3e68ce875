//! Eager writes: a small RDMA write that rides in the next send.
//!
//! An RDMA write and the send that announces it (rmr's write + notify)
//! are two libfabric operations, and on the `tcp` provider two operations
//! cost about twice one (each its own frame, `sendmsg` and progress pass
//! at the peer). So a small suppressed write is *held* by the sender (its
//! bytes copied at post time) and leaves inside the next send's message;
//! the receiver checks the write against its own registrations, exactly
//! as the provider checks a real write, places it and only then completes
//! the receive. When no send follows soon enough the held write is posted
//! as an ordinary RDMA write: by the endpoint's next post that does not
//! take it along, or at the moments [`crate::cork`] lists (a thread
//! begins to wait or drives, the CQ's progress thread wakes).
//!
//! ## Wire format
//! Every message (where the provider carries 8 bytes of remote CQ data
//! and two segments per operation) starts with a *header* of `hlen`
//! bytes, `hlen` a multiple of 8 up to [`HDR_MAX`], named in the
//! message's remote CQ data: bits 62-63 the kind (plain, solicited,
//! immediate), bits 32-39 `hlen`, bits 0-31 an immediate (a plain message
//! with an empty header carries no remote CQ data). A header is a
//! list of entries, each starting with a word `type | len << 8 | id << 32`
//! (`type` 8 bits, `len` 24, `id` 32):
//! - [`T_WRITE`]: key, target address, the writer's cookie, then `len`
//!   bytes of data padded to a word; `id` is the low 32 bits of the
//!   write's sequence number at the writer;
//! - [`T_IMM`]: an RDMA write with immediate's length, in the `id` bits
//!   (the message carries no payload);
//! - [`T_ACK`]: the sender has placed the peer's riding writes up to
//!   the one numbered `id` (see [`crate::order`]);
//! - [`T_PAD`]: the rest of the header is padding.
//!
//! Only suppressed writes ride (their success is never reported). One the
//! receiver refuses (a bad key, no remote write right, out of bounds, a
//! deregistered region) places nothing; the receiver then takes in no
//! later message (nor the writes riding in it), RDMA-writes a *fault
//! record* (status, id, cookie) into the writer's control words and
//! breaks the connection (until it closes, its provider still serves the
//! peer's RDMA operations, as it would have served them before the
//! refusal was seen), and the writer reports the write with that status
//! and its cookie, once, as its connection ends (an RDMA write refused by
//! a real NIC ends an RC connection too). If the writer's own end of the
//! connection comes first (it disconnected meanwhile), the record is not
//! seen and the write goes unreported, as a suppressed write's fate goes
//! on any connection that ends. Riding writes are ordered with later RDMA
//! operations by [`crate::order`].
//!
//! A message whose header and payload together exceed [`HDR_MAX`] pads its
//! header to exactly [`HDR_MAX`]. So the receiver can post a receive in
//! the user's own memory as a [`HDR_MAX`]-byte slot followed by the user's
//! segments: a small message lands whole in the slot (and is copied out),
//! a large one's payload lands straight in the user's memory.

use rmr_api::Status;

/// The longest header (a receive's slot).
pub(crate) const HDR_MAX: usize = 128;
/// The head of a write entry (type word, key, address, cookie).
const WRITE_HEAD: usize = 32;
/// The largest write that rides in a send: room is kept for an
/// immediate's entry.
pub(crate) const EAGER_MAX: usize = HDR_MAX - WRITE_HEAD - 8;

pub(crate) const T_PAD: u64 = 0;
pub(crate) const T_WRITE: u64 = 1;
pub(crate) const T_IMM: u64 = 2;
pub(crate) const T_ACK: u64 = 3;

/// What a message's header is padded with (and a large message's header
/// where nothing rides).
pub(crate) static PAD: [u8; HDR_MAX] = [0; HDR_MAX];

/// Kinds carried in the top bits of remote CQ data.
pub(crate) const KIND_SHIFT: u32 = 62;
pub(crate) const KIND_SOLICITED: u64 = 1;
pub(crate) const KIND_IMM: u64 = 2;
const HLEN_SHIFT: u32 = 32;

/// A message's remote CQ data.
pub(crate) fn cq_data(kind: u64, hlen: usize, imm: u32) -> u64 {
    debug_assert!(hlen <= HDR_MAX && hlen % 8 == 0);
    (kind << KIND_SHIFT) | ((hlen as u64) << HLEN_SHIFT) | u64::from(imm)
}

/// Reads a message's remote CQ data: (kind, header length, immediate), or
/// why it is not one rmr sends.
pub(crate) fn parse_cq_data(d: u64) -> Result<(u64, usize, u32), String> {
    let kind = d >> KIND_SHIFT;
    let hlen = ((d >> HLEN_SHIFT) & 0xff) as usize;
    let reserved = d & !((3 << KIND_SHIFT) | (0xff << HLEN_SHIFT) | 0xffff_ffff);
    if reserved != 0 || kind > KIND_IMM || hlen > HDR_MAX || hlen % 8 != 0 {
        return Err(format!("malformed message data {d:#018x}"));
    }
    Ok((kind, hlen, d as u32))
}

/// Room a write of `len` bytes takes in a header.
pub(crate) fn write_room(len: usize) -> usize {
    WRITE_HEAD + len.next_multiple_of(8)
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn put(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A write that rides in a message: where it goes, and who wrote it (the
/// writer's sequence number and cookie, for a refusal's report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) key: u64,
    pub(crate) addr: u64,
    pub(crate) seq: u64,
    pub(crate) cookie: u64,
}

/// Starts a write entry at `h[at..]` and returns the slice its `len` data
/// bytes go to; the entry ends at `at + write_room(len)`.
pub(crate) fn put_write(h: &mut [u8], at: usize, w: Write, len: usize) -> &mut [u8] {
    debug_assert!(len <= EAGER_MAX);
    put(h, at, T_WRITE | (len as u64) << 8 | (w.seq & 0xffff_ffff) << 32);
    put(h, at + 8, w.key);
    put(h, at + 16, w.addr);
    put(h, at + 24, w.cookie);
    let room = write_room(len);
    h[at + WRITE_HEAD + len..at + room].fill(0);
    &mut h[at + WRITE_HEAD..at + WRITE_HEAD + len]
}

/// Puts an acknowledgement's entry at `h[at..]`; it ends at `at + 8`.
pub(crate) fn put_ack(h: &mut [u8], at: usize, id: u64) {
    put(h, at, T_ACK | (id & 0xffff_ffff) << 32);
}

/// Sets the `id` of the write entry at `h[at..]`.
pub(crate) fn set_write_id(h: &mut [u8], at: usize, id: u64) {
    let w = word(h, at) & 0xffff_ffff;
    put(h, at, w | (id & 0xffff_ffff) << 32);
}

/// Puts an immediate's entry at `h[at..]`; it ends at `at + 8`.
pub(crate) fn put_imm(h: &mut [u8], at: usize, len: u64) {
    put(h, at, T_IMM | len.min(u64::from(u32::MAX)) << 32);
}

/// The longest length an entry names.
const LEN_MAX: u64 = (1 << 24) - 1;

/// Where a write entry's data start within it.
pub(crate) const WRITE_DATA: usize = WRITE_HEAD;

/// One entry of a received header.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Entry<'a> {
    Write { w: Write, data: &'a [u8] },
    Imm { len: u64 },
    Ack { id: u64 },
}

/// Reads a received header. Every entry is checked to lie inside it
/// before any is returned: a malformed header applies nothing.
pub(crate) fn entries(h: &[u8]) -> Result<smallvec::SmallVec<[Entry<'_>; 2]>, String> {
    let mut out = smallvec::SmallVec::new();
    let mut at = 0;
    while at + 8 <= h.len() {
        let w = word(h, at);
        let (ty, len, id) = (w & 0xff, ((w >> 8) & LEN_MAX) as usize, w >> 32);
        match ty {
            T_PAD => break,
            T_WRITE => {
                let end = at.checked_add(write_room(len)).filter(|&e| e <= h.len());
                let Some(end) = end else {
                    return Err(format!("a {len}-byte write overruns a {}-byte header", h.len()));
                };
                let data = &h[at + WRITE_HEAD..at + WRITE_HEAD + len];
                let (key, addr, cookie) = (word(h, at + 8), word(h, at + 16), word(h, at + 24));
                out.push(Entry::Write { w: Write { key, addr, seq: id, cookie }, data });
                at = end;
            }
            T_ACK => {
                out.push(Entry::Ack { id });
                at += 8;
            }
            T_IMM => {
                out.push(Entry::Imm { len: id });
                at += 8;
            }
            _ => return Err(format!("unknown header entry {ty:#x}")),
        }
    }
    if at < h.len() && at + 8 > h.len() {
        return Err("a header's length is not a whole number of words".into());
    }
    Ok(out)
}

/// Why a write that rode in a message was refused (the provider's
/// statuses for a real write).
pub(crate) fn refusal(s: Status) -> &'static str {
    match s {
        Status::BadKey => "no region of the endpoint's protection zone has that key",
        Status::RemoteAccess => "the region grants no remote write",
        Status::OutOfBounds => "the write reaches outside the region",
        _ => "refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cq_data_round_trips_and_rejects_what_rmr_never_sends() {
        let d = cq_data(KIND_IMM, 40, 0xC0FFEE);
        assert_eq!(parse_cq_data(d), Ok((KIND_IMM, 40, 0xC0FFEE)));
        assert_eq!(parse_cq_data(cq_data(0, HDR_MAX, 0)), Ok((0, HDR_MAX, 0)));
        assert!(parse_cq_data(3 << KIND_SHIFT).is_err(), "unknown kind");
        assert!(parse_cq_data(1 << 40).is_err(), "reserved bit");
        assert!(parse_cq_data(12 << HLEN_SHIFT).is_err(), "not a word multiple");
        assert!(parse_cq_data(136 << HLEN_SHIFT).is_err(), "longer than a slot");
    }

    #[test]
    fn entries_round_trip() {
        let mut h = [0xffu8; HDR_MAX];
        let w = Write { key: 7, addr: 0x1000, seq: 0x1_0000_0009, cookie: 42 };
        put_write(&mut h, 0, w, 5).copy_from_slice(b"hello");
        let at = write_room(5);
        put_imm(&mut h, at, 5);
        let hlen = at + 8;
        assert_eq!(
            entries(&h[..hlen]).unwrap().as_slice(),
            &[Entry::Write { w: Write { seq: 9, ..w }, data: b"hello" }, Entry::Imm { len: 5 }]
        );
        // Padding ends the list.
        h[hlen..].fill(0);
        assert_eq!(entries(&h).unwrap().len(), 2);
        assert_eq!(EAGER_MAX + WRITE_HEAD + 8, HDR_MAX);
        assert_eq!(write_room(EAGER_MAX) + 8, HDR_MAX);
    }

    #[test]
    fn malformed_headers_apply_nothing() {
        let mut h = [0u8; 64];
        put_write(&mut h, 0, Write { key: 1, addr: 2, seq: 3, cookie: 4 }, 8);
        // A second write whose data run past the end.
        put(&mut h, 40, T_WRITE | 64 << 8);
        assert!(entries(&h[..48]).is_err());
        // A length past the header.
        put(&mut h, 0, T_WRITE | LEN_MAX << 8);
        assert!(entries(&h).is_err());
        put(&mut h, 0, 9);
        assert!(entries(&h).unwrap_err().contains("unknown"));
    }
}
