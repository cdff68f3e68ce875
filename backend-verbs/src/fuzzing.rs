//! Entry points for the fuzz target `fuzz/fuzz_targets/verbs_wr.rs` and
//! its regression replay (`tests/fuzz_regressions.rs`). Not a stable API.
//!
//! [`peer_bytes`] runs every pure decoder and planner of the backend that
//! bytes from a peer reach — connection private data, the remote context
//! a peer hands out, the target a work request is built for, work
//! completions — and checks what must hold for any input: no panic,
//! whatever decodes encodes back to the same bytes, and a planned target
//! never leaves the region the context advertises.

use crate::completion::{Wc, breaks_qp, describe, map_status, recv_info};
use crate::private_data::{Ctrl, HDR, Kind, MAX_USER, decode, encode};
use crate::wr::{
    LocalSeg, Segs, WrKind, atomic_target, decode_wr_id, encode_wr_id, plan_send, remote_target,
};
use rmr_api::{DtoFlags, DtoOp, RmrContext};

/// Reads little-endian words from the input, zeros past its end.
struct Words<'a>(&'a [u8], usize);

impl Words<'_> {
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for (i, x) in b.iter_mut().enumerate() {
            *x = self.0.get(self.1 + i).copied().unwrap_or(0);
        }
        self.1 += 8;
        u64::from_le_bytes(b)
    }
    fn u32(&mut self) -> u32 {
        self.u64() as u32
    }
}

/// Runs the backend's peer-facing decoders and planners on `b` (see the
/// module docs). Panics when an invariant breaks.
pub fn peer_bytes(b: &[u8]) {
    // Connection private data, as the CM pads it.
    if let Some(d) = decode(b) {
        assert!(d.user.len() <= MAX_USER.max(b.len() - HDR), "user data past the input");
        if d.user.len() <= MAX_USER {
            let again = encode(d.kind, d.ctrl, &d.user).expect("a decoded header encodes");
            assert_eq!(&b[..again.len()], again.as_slice(), "private data round trip");
        }
    }
    // A remote context a peer sends, and the WR targets built from it.
    let mut w = Words(b, 0);
    let ctx =
        RmrContext::from_bytes(b).unwrap_or_else(|_| RmrContext::new(w.u64(), w.u64(), w.u64()));
    let (offset, len) = (w.u64(), w.u64() % (1 << 32));
    if let Ok(t) = remote_target(&ctx, offset, len) {
        assert!(offset.checked_add(len).is_some_and(|end| end <= ctx.len), "out of the region");
        assert_eq!(Some(t.addr), ctx.addr.checked_add(offset), "the target moved");
    }
    if let Ok(t) = atomic_target(&ctx, offset) {
        assert!(t.addr % 8 == 0 && offset + 8 <= ctx.len, "a bad atomic target");
    }
    // A work request planned from input-chosen fields.
    let kind = match w.u32() % 7 {
        0 => WrKind::Send,
        1 => WrKind::Write,
        2 => WrKind::WriteImm(w.u32()),
        3 => WrKind::Read,
        4 => WrKind::FetchAdd(w.u64()),
        5 => WrKind::CmpSwap { compare: w.u64(), swap: w.u64() },
        _ => WrKind::Send,
    };
    let nsegs = (w.u32() % 5) as usize;
    let segs: Segs =
        (0..nsegs).map(|_| LocalSeg { addr: w.u64(), len: w.u32(), lkey: w.u32() }).collect();
    let flags = DtoFlags::from_bits_truncate(w.u32());
    let (signalled, max_inline) = (w.u32() & 1 == 1, w.u32() % 4096);
    let total: u64 = segs.iter().map(|s| u64::from(s.len)).sum();
    let plan = plan_send(kind, segs, None, flags, signalled, max_inline);
    assert_eq!(plan.bytes, total);
    let inline = plan.send_flags & rdma_sys::ibv_send_flags::IBV_SEND_INLINE.0 != 0;
    assert!(!inline || (total > 0 && total <= u64::from(max_inline)), "inline past the QP's");
    // Work completions: any status and opcode maps to a status, in words.
    let wc = Wc {
        wr_id: w.u64(),
        status: w.u32() % 32,
        opcode: w.u32(),
        byte_len: w.u32(),
        imm: Some(w.u32()).filter(|_| b.len() % 2 == 0),
        qp_num: w.u32(),
        vendor_err: w.u32(),
    };
    let (q, seq) = decode_wr_id(wc.wr_id);
    assert_eq!(decode_wr_id(encode_wr_id(q, seq)), (q, seq), "wr_id round trip");
    let r = recv_info(&wc);
    assert!(r.status.is_ok() || r.bytes == 0, "a failed receive reports bytes");
    for op in [DtoOp::Send, DtoOp::Recv, DtoOp::RdmaWrite, DtoOp::RdmaRead, DtoOp::FetchAdd] {
        let s = map_status(wc.status, op);
        assert_eq!(s.is_ok(), wc.status == 0, "{s:?} for status {}", wc.status);
    }
    let _ = (breaks_qp(wc.status), describe(wc.status, wc.vendor_err));
    let _ = encode(Kind::Reject, Ctrl::default(), &b[..b.len().min(MAX_USER)]);
}

#[cfg(test)]
mod tests {
    /// Inputs from a small generator: what the fuzz target starts from.
    #[test]
    fn any_bytes_keep_the_invariants() {
        let mut x = 0x853c_49e6_748f_ea9bu64;
        for n in 0..4000 {
            let mut v = vec![0u8; n % 180];
            for b in &mut v {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            if n % 3 == 0 && v.len() >= 5 {
                v[..5].copy_from_slice(&[b'r', b'm', 1, (n % 4) as u8, (n % 60) as u8]);
            }
            super::peer_bytes(&v);
        }
    }

    /// A peer's context near the top of the address space: the target's
    /// address must not wrap (it used to overflow).
    #[test]
    fn a_context_at_the_top_of_memory_does_not_wrap() {
        let ctx = rmr_api::RmrContext::new(1, u64::MAX - 4, 64);
        assert!(crate::wr::remote_target(&ctx, 16, 8).is_err());
        assert!(crate::wr::atomic_target(&ctx, 16).is_err());
    }
}
