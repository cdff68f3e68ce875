//! Work-request planning (pure): LMR triplets and DTO flags in, the fields
//! of an `ibv_send_wr` / `ibv_recv_wr` out. The FFI layer (`sys::qp`)
//! only copies a [`SendPlan`] into the C structs.

use rdma_sys::{ibv_access_flags as A, ibv_send_flags as F, ibv_wr_opcode as Op};
use rmr_api::{Access, DtoFlags, DtoOp, Error, Result, RmrContext, Sge};
use smallvec::SmallVec;

/// One scatter/gather entry as the HCA sees it (`struct ibv_sge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalSeg {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the memory region holding it.
    pub lkey: u32,
}

/// A scatter/gather list; up to four entries live inline.
pub type Segs = SmallVec<[LocalSeg; 4]>;

/// Translates LMR triplets into scatter/gather entries. `lkey` gives the
/// local key of an LMR (None for an LMR of another provider or one that is
/// deregistered). Bounds, rights and the PZ are checked before this, by
/// [`rmr_api::provider::check_local_sges`].
///
/// # Errors
/// [`Error::InvalidArgument`] for a foreign LMR or a segment over 4 GiB.
pub fn local_segs(
    sges: &[Sge<'_>],
    lkey: impl Fn(&dyn rmr_api::Lmr) -> Option<u32>,
) -> Result<Segs> {
    sges.iter()
        .map(|s| {
            let lkey = lkey(s.lmr).ok_or_else(|| {
                Error::invalid("LMR not registered with this verbs IA (or deregistered)")
            })?;
            let len = u32::try_from(s.len)
                .map_err(|_| Error::invalid(format!("segment of {} bytes (max 4 GiB)", s.len)))?;
            // Inside the region itself, not only the LMR's account of its
            // length (the HCA would fail the work request later instead).
            let (region, off) = rmr_api::provider::seg_place(s)?;
            Ok(LocalSeg { addr: region.addr() + off, len, lkey })
        })
        .collect()
}

/// `ibv_reg_mr` access flags for an LMR's rights. Verbs requires local
/// write whenever remote write or remote atomics are granted.
pub fn mr_access(a: Access) -> u32 {
    let mut f = 0u32;
    if a.contains(Access::LOCAL_WRITE) {
        f |= A::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(Access::REMOTE_READ) {
        f |= A::IBV_ACCESS_REMOTE_READ.0;
    }
    if a.contains(Access::REMOTE_WRITE) {
        f |= A::IBV_ACCESS_REMOTE_WRITE.0 | A::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if a.contains(Access::REMOTE_ATOMIC) {
        f |= A::IBV_ACCESS_REMOTE_ATOMIC.0 | A::IBV_ACCESS_LOCAL_WRITE.0;
    }
    f
}

/// Folds a context key into a 32-bit rkey. Keys this backend hands out are
/// rkeys (high half zero) and pass unchanged; a forged or foreign key with
/// high bits reaches the target as the xor of its halves, where the HCA
/// refuses it like any unknown key.
pub fn fold_key(key: u64) -> u32 {
    (key as u32) ^ ((key >> 32) as u32)
}

/// Where a one-sided operation lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteTarget {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// Checks `[offset, offset+len)` against the context's extent and gives the target.
///
/// # Errors
/// [`Error::OutOfBounds`] when the range leaves the advertised region.
pub fn remote_target(ctx: &RmrContext, offset: u64, len: u64) -> Result<RemoteTarget> {
    let out = || Error::OutOfBounds { offset, len, limit: ctx.len };
    match offset.checked_add(len) {
        Some(end) if end <= ctx.len => {}
        _ => return Err(out()),
    }
    // A peer's context may name any address: one whose range wraps past
    // the top of memory is outside it too.
    let addr =
        ctx.addr.checked_add(offset).filter(|a| a.checked_add(len).is_some()).ok_or_else(out)?;
    Ok(RemoteTarget { addr, rkey: fold_key(ctx.key()) })
}

/// The target of an atomic: 8 bytes, 8-byte aligned, inside the region.
///
/// # Errors
/// [`Error::OutOfBounds`], or [`Error::InvalidArgument`] when misaligned.
pub fn atomic_target(ctx: &RmrContext, offset: u64) -> Result<RemoteTarget> {
    let t = remote_target(ctx, offset, 8)?;
    if t.addr % 8 != 0 {
        return Err(Error::invalid(format!("atomic target {:#x} is not 8-byte aligned", t.addr)));
    }
    Ok(t)
}

/// Which send-queue operation a DTO is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrKind {
    /// A send (two-sided).
    Send,
    /// An RDMA write.
    Write,
    /// An RDMA write with 32-bit immediate data.
    WriteImm(u32),
    /// An RDMA read.
    Read,
    /// A 64-bit fetch-and-add.
    FetchAdd(u64),
    /// A 64-bit compare-and-swap.
    CmpSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

impl WrKind {
    /// The rmr operation reported in completions.
    pub fn op(self) -> DtoOp {
        match self {
            WrKind::Send => DtoOp::Send,
            WrKind::Write | WrKind::WriteImm(_) => DtoOp::RdmaWrite,
            WrKind::Read => DtoOp::RdmaRead,
            WrKind::FetchAdd(_) => DtoOp::FetchAdd,
            WrKind::CmpSwap { .. } => DtoOp::CmpSwap,
        }
    }

    /// Rights the local segments need: the NIC writes into them for reads
    /// and atomic results.
    pub fn local_access(self) -> Access {
        match self {
            WrKind::Read | WrKind::FetchAdd(_) | WrKind::CmpSwap { .. } => Access::LOCAL_WRITE,
            _ => Access::empty(),
        }
    }
}

/// Immediate data carried by a solicited send so the receiver can tell
/// (`struct ibv_wc` has no solicited flag): "SOLI".
pub const SOLICITED_MARK: u32 = 0x534f_4c49;

/// Everything `ibv_post_send` needs, decided without touching the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendPlan {
    /// `ibv_wr_opcode`.
    pub opcode: u32,
    /// `ibv_send_flags` bits.
    pub send_flags: u32,
    /// Gather list (scatter list for reads and atomic results).
    pub segs: Segs,
    /// Target of a one-sided operation.
    pub remote: Option<RemoteTarget>,
    /// Immediate data in host order (the FFI layer converts to network order).
    pub imm: Option<u32>,
    /// Fetch-and-add addend or compare-and-swap expected value.
    pub compare_add: u64,
    /// Compare-and-swap new value.
    pub swap: u64,
    /// Total bytes moved.
    pub bytes: u64,
}

/// Plans one send-queue WR.
///
/// `signalled` is the tracker's decision (the user's, or a periodic signal
/// of a suppressed WR); `max_inline` is the QP's granted inline size.
pub fn plan_send(
    kind: WrKind,
    segs: Segs,
    remote: Option<RemoteTarget>,
    flags: DtoFlags,
    signalled: bool,
    max_inline: u32,
) -> SendPlan {
    let bytes: u64 = segs.iter().map(|s| u64::from(s.len)).sum();
    let solicited = flags.contains(DtoFlags::SOLICITED);
    let (opcode, imm, compare_add, swap) = match kind {
        WrKind::Send if solicited => (Op::IBV_WR_SEND_WITH_IMM, Some(SOLICITED_MARK), 0, 0),
        WrKind::Send => (Op::IBV_WR_SEND, None, 0, 0),
        WrKind::Write => (Op::IBV_WR_RDMA_WRITE, None, 0, 0),
        WrKind::WriteImm(v) => (Op::IBV_WR_RDMA_WRITE_WITH_IMM, Some(v), 0, 0),
        WrKind::Read => (Op::IBV_WR_RDMA_READ, None, 0, 0),
        WrKind::FetchAdd(a) => (Op::IBV_WR_ATOMIC_FETCH_AND_ADD, None, a, 0),
        WrKind::CmpSwap { compare, swap } => (Op::IBV_WR_ATOMIC_CMP_AND_SWP, None, compare, swap),
    };
    let mut f = 0u32;
    if signalled {
        f |= F::IBV_SEND_SIGNALED.0;
    }
    if solicited && matches!(kind, WrKind::Send | WrKind::WriteImm(_)) {
        f |= F::IBV_SEND_SOLICITED.0;
    }
    if flags.contains(DtoFlags::BARRIER_FENCE) {
        f |= F::IBV_SEND_FENCE.0;
    }
    let inlinable = matches!(kind, WrKind::Send | WrKind::Write | WrKind::WriteImm(_));
    if inlinable && bytes > 0 && bytes <= u64::from(max_inline) {
        f |= F::IBV_SEND_INLINE.0;
    }
    SendPlan { opcode, send_flags: f, segs, remote, imm, compare_add, swap, bytes }
}

/// Which queue a work request id belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrQueue {
    /// The send queue (user DTOs).
    Send,
    /// The receive queue.
    Recv,
    /// A send-queue WR of the backend itself (the disconnect notice).
    Internal,
}

const RECV_BIT: u64 = 1 << 63;
const INTERNAL_BIT: u64 = 1 << 62;
const SEQ_MASK: u64 = INTERNAL_BIT - 1;

/// Packs a queue and a sequence number into a `wr_id`. The queue must be
/// in the id because a failed completion's opcode is undefined.
pub fn encode_wr_id(q: WrQueue, seq: u64) -> u64 {
    let seq = seq & SEQ_MASK;
    match q {
        WrQueue::Send => seq,
        WrQueue::Recv => RECV_BIT | seq,
        WrQueue::Internal => INTERNAL_BIT | seq,
    }
}

/// Inverse of [`encode_wr_id`].
pub fn decode_wr_id(id: u64) -> (WrQueue, u64) {
    let q = if id & RECV_BIT != 0 {
        WrQueue::Recv
    } else if id & INTERNAL_BIT != 0 {
        WrQueue::Internal
    } else {
        WrQueue::Send
    };
    (q, id & SEQ_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmr_api::{Lmr, MemRegion};
    use std::any::Any;
    use std::sync::Arc;

    /// A plain LMR (data only) to feed the translation.
    struct Plain {
        region: Arc<MemRegion>,
        offset: u64,
        len: u64,
        key: u32,
    }
    impl Lmr for Plain {
        fn region(&self) -> &Arc<MemRegion> {
            &self.region
        }
        fn offset(&self) -> u64 {
            self.offset
        }
        fn len(&self) -> u64 {
            self.len
        }
        fn access(&self) -> Access {
            Access::ALL
        }
        fn pz_id(&self) -> u64 {
            1
        }
        fn rmr_context(&self) -> RmrContext {
            RmrContext::new(self.key.into(), self.region.addr() + self.offset, self.len)
        }
        fn is_registered(&self) -> bool {
            true
        }
        fn deregister(&self) -> Result<()> {
            Ok(())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn key_of(l: &dyn Lmr) -> Option<u32> {
        l.as_any().downcast_ref::<Plain>().map(|p| p.key)
    }

    #[test]
    fn triplets_become_sges_at_region_address_plus_offsets() {
        let region = MemRegion::new(8192);
        let a = Plain { region: region.clone(), offset: 4096, len: 4096, key: 7 };
        let b = Plain { region: region.clone(), offset: 0, len: 100, key: 9 };
        let segs = local_segs(&[Sge::new(&a, 10, 20), Sge::whole(&b)], key_of).unwrap();
        assert_eq!(
            segs.as_slice(),
            &[
                LocalSeg { addr: region.addr() + 4106, len: 20, lkey: 7 },
                LocalSeg { addr: region.addr(), len: 100, lkey: 9 },
            ]
        );
        let huge = Plain { region, offset: 0, len: 1 << 33, key: 1 };
        assert!(local_segs(&[Sge::whole(&huge)], key_of).is_err());
        assert!(local_segs(&[Sge::whole(&a)], |_| None).is_err());
    }

    #[test]
    fn access_flags_add_local_write_where_verbs_needs_it() {
        let lw = A::IBV_ACCESS_LOCAL_WRITE.0;
        assert_eq!(mr_access(Access::empty()), 0);
        assert_eq!(mr_access(Access::LOCAL_WRITE), lw);
        assert_eq!(mr_access(Access::REMOTE_READ), A::IBV_ACCESS_REMOTE_READ.0);
        assert_eq!(mr_access(Access::REMOTE_WRITE), A::IBV_ACCESS_REMOTE_WRITE.0 | lw);
        assert_eq!(mr_access(Access::REMOTE_ATOMIC), A::IBV_ACCESS_REMOTE_ATOMIC.0 | lw);
        assert_eq!(mr_access(Access::ALL), 0b1111);
    }

    #[test]
    fn remote_ranges_keys_and_alignment() {
        let ctx = RmrContext::new(0x1234, 0x10_0000, 4096);
        assert_eq!(
            remote_target(&ctx, 96, 1000).unwrap(),
            RemoteTarget { addr: 0x10_0060, rkey: 0x1234 }
        );
        assert!(matches!(
            remote_target(&ctx, 4000, 100),
            Err(Error::OutOfBounds { offset: 4000, len: 100, limit: 4096 })
        ));
        assert!(remote_target(&ctx, u64::MAX, 2).is_err());
        assert_eq!(atomic_target(&ctx, 8).unwrap().addr, 0x10_0008);
        assert!(matches!(atomic_target(&ctx, 3), Err(Error::InvalidArgument(_))));
        assert!(matches!(atomic_target(&ctx, 4090), Err(Error::OutOfBounds { .. })));
        assert_eq!(fold_key(0x1234), 0x1234);
        let forged = 0x1234u64 ^ 0x5a5a_5a5a_0000_0001;
        assert_ne!(fold_key(forged), 0x1234);
    }

    fn seg(len: u32) -> Segs {
        let mut s = Segs::new();
        s.push(LocalSeg { addr: 0x1000, len, lkey: 5 });
        s
    }

    #[test]
    fn opcodes_and_flags() {
        let t = Some(RemoteTarget { addr: 0x2000, rkey: 3 });
        let p = plan_send(WrKind::Write, seg(4096), t, DtoFlags::SUPPRESS, false, 64);
        assert_eq!((p.opcode, p.send_flags, p.bytes), (Op::IBV_WR_RDMA_WRITE, 0, 4096));
        // Small payloads go inline; the signalled bit is the tracker's decision.
        let p = plan_send(WrKind::Send, seg(8), None, DtoFlags::empty(), true, 64);
        assert_eq!(p.opcode, Op::IBV_WR_SEND);
        assert_eq!(p.send_flags, F::IBV_SEND_SIGNALED.0 | F::IBV_SEND_INLINE.0);
        // Solicited sends carry the mark so the receiver can report it.
        let p = plan_send(WrKind::Send, seg(100), None, DtoFlags::SOLICITED, true, 64);
        assert_eq!((p.opcode, p.imm), (Op::IBV_WR_SEND_WITH_IMM, Some(SOLICITED_MARK)));
        assert_eq!(p.send_flags, F::IBV_SEND_SIGNALED.0 | F::IBV_SEND_SOLICITED.0);
        let p = plan_send(WrKind::WriteImm(0xC0FFEE), seg(1000), t, DtoFlags::empty(), true, 64);
        assert_eq!((p.opcode, p.imm), (Op::IBV_WR_RDMA_WRITE_WITH_IMM, Some(0xC0FFEE)));
        // Reads are never inline; the fence orders them before later work.
        let p = plan_send(WrKind::Read, seg(8), t, DtoFlags::BARRIER_FENCE, true, 64);
        assert_eq!(p.opcode, Op::IBV_WR_RDMA_READ);
        assert_eq!(p.send_flags, F::IBV_SEND_SIGNALED.0 | F::IBV_SEND_FENCE.0);
        let p = plan_send(WrKind::FetchAdd(5), seg(8), t, DtoFlags::empty(), true, 64);
        assert_eq!((p.opcode, p.compare_add, p.send_flags), (6, 5, F::IBV_SEND_SIGNALED.0));
        let k = WrKind::CmpSwap { compare: 1, swap: 2 };
        let p = plan_send(k, seg(8), t, DtoFlags::empty(), true, 0);
        assert_eq!((p.opcode, p.compare_add, p.swap), (Op::IBV_WR_ATOMIC_CMP_AND_SWP, 1, 2));
        // Zero-length sends are plain sends with no SGE and no inline bit.
        let p = plan_send(WrKind::Send, Segs::new(), None, DtoFlags::empty(), true, 64);
        assert_eq!((p.bytes, p.send_flags), (0, F::IBV_SEND_SIGNALED.0));
        assert_eq!(WrKind::Read.local_access(), Access::LOCAL_WRITE);
        assert_eq!(WrKind::Send.local_access(), Access::empty());
        assert_eq!(WrKind::WriteImm(1).op(), DtoOp::RdmaWrite);
    }

    #[test]
    fn wr_ids_round_trip() {
        for q in [WrQueue::Send, WrQueue::Recv, WrQueue::Internal] {
            for seq in [0, 1, 12345, SEQ_MASK] {
                assert_eq!(decode_wr_id(encode_wr_id(q, seq)), (q, seq));
            }
        }
    }
}
