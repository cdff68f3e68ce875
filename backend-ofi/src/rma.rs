//! RDMA writes, reads and atomics: posted as libfabric operations, or, a
//! small suppressed write, held for the next message or riding in its own
//! (see [`crate::eager`]), after the rides they overlap (see
//! [`crate::order`]).

use crate::dto::{LEN_MASK, SendPart, copy_from, with};
use crate::eager::{self, HDR_MAX, KIND_IMM, KIND_SHIFT};
use crate::ep::EpShared;
use crate::msg;
use rmr_api::{Access, DtoFlags, DtoOp, Error, Result, RmrContext, Sge};
use std::sync::atomic::Ordering;

/// The largest write with immediate that rides in its own message (its
/// entry, the immediate's and an acknowledgement fill a header).
const IMM_RIDE_MAX: u64 = 80;

impl EpShared {
    /// Whether another write may ride (see [`crate::order::room`]).
    fn ride_room(&self) -> bool {
        crate::order::room(&self.tx.lock().unwrap_or_else(|e| e.into_inner()))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_rma(
        &self,
        read: bool,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        imm: Option<u32>,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let need = if read { Access::LOCAL_WRITE } else { Access::empty() };
        let (iov, keep, total) = self.check_sges(local, need)?;
        let r = self.remote(remote, remote_offset, total)?;
        let base = self.fence_flags(flags)?;
        let op = if read { DtoOp::RdmaRead } else { DtoOp::RdmaWrite };
        let call = if read { "fi_readmsg" } else { "fi_writemsg" };
        let f = &self.ia.feat;
        // Small enough to ride in a message (see `crate::eager`).
        // Only suppressed writes ride: their success is never reported
        // (a refusal is, see `crate::eager`).
        let rides = !read
            && total > 0
            && total <= f.eager_max
            && flags.contains(DtoFlags::SUPPRESS)
            && base == 0
            && f.hold;
        match imm {
            None => {
                let mut meta = self.user_meta(cookie, op, flags, total, keep);
                meta.corkable = !read;
                if rides {
                    match self.hold(local, r, meta)? {
                        Some(m) => meta = m,
                        None => return Ok(()),
                    }
                }
                // After the writes that rode in messages it overlaps.
                meta.target = Some(r);
                self.post_tx(
                    meta,
                    base,
                    None,
                    // SAFETY: `keep` holds every region of `iov` until completion or flush.
                    &mut |ep, tok, fl, _, _| unsafe { msg::rma(ep, read, &iov, r, tok, 0, fl) },
                    call,
                )
            }
            Some(imm) if f.eager => {
                // Write with immediate: a message whose header carries the
                // write's length (and, if small, the write itself) and
                // whose remote CQ data the immediate, after the write
                // (FI_ORDER_SAW makes the data visible first).
                let mut own = [0u8; HDR_MAX];
                let mut at = 0;
                // Room is left for its length and an acknowledgement.
                let rides = rides && total <= IMM_RIDE_MAX && self.ride_room();
                if rides {
                    // Its id: the message's sequence number, set as it is posted.
                    let w = eager::Write { key: r.key, addr: r.addr, seq: 0, cookie };
                    let dst = eager::put_write(&mut own, 0, w, total as usize);
                    copy_from(local, dst)?;
                    at = eager::write_room(total as usize);
                } else {
                    let mut wmeta =
                        self.user_meta(cookie, op, flags | DtoFlags::SUPPRESS, total, keep.clone());
                    // The write waits in the socket for its announcing send.
                    wmeta.corkable = true;
                    wmeta.target = Some(r);
                    self.post_tx(
                        wmeta,
                        base,
                        None,
                        // SAFETY: as above.
                        &mut |ep, tok, fl, _, _| unsafe {
                            msg::rma(ep, false, &iov, r, tok, 0, fl)
                        },
                        call,
                    )?;
                }
                eager::put_imm(&mut own, at, total);
                let part = SendPart {
                    kind: KIND_IMM,
                    imm,
                    n: 0,
                    own: &own[..at + 8],
                    plain: 0,
                    patch: rides.then_some(0),
                    ride: rides.then_some(r),
                };
                let mut smeta = self.user_meta(cookie, op, flags, total, keep);
                smeta.wire = 0;
                self.post_tx(
                    smeta,
                    0,
                    Some(part),
                    // SAFETY: the header lives in the record until completion or flush.
                    &mut |ep, tok, fl, pre, data| unsafe {
                        msg::send(ep, &with(pre, &[]), tok, data, fl)
                    },
                    "fi_sendmsg",
                )
            }
            Some(imm) => {
                // Without rmr's header: the write (suppressed), then a
                // zero-length send whose remote CQ data carries the
                // immediate and the write's length.
                let mut wmeta =
                    self.user_meta(cookie, op, flags | DtoFlags::SUPPRESS, total, keep.clone());
                wmeta.corkable = true;
                self.post_tx(
                    wmeta,
                    base,
                    None,
                    // SAFETY: as above.
                    &mut |ep, tok, fl, _, _| unsafe { msg::rma(ep, false, &iov, r, tok, 0, fl) },
                    call,
                )?;
                let plain =
                    (KIND_IMM << KIND_SHIFT) | ((total.min(LEN_MASK)) << 32) | u64::from(imm);
                let part = SendPart {
                    kind: KIND_IMM,
                    imm,
                    n: 0,
                    own: &[],
                    plain,
                    patch: None,
                    ride: None,
                };
                let mut smeta = self.user_meta(cookie, op, flags, total, keep);
                smeta.wire = 0;
                self.post_tx(
                    smeta,
                    0,
                    Some(part),
                    // SAFETY: a zero-length send reads no memory.
                    &mut |ep, tok, fl, _, data| unsafe { msg::send(ep, &[], tok, data, fl) },
                    "fi_sendmsg",
                )
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_atomic(
        &self,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        operand: u64,
        compare: Option<u64>,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let what = if compare.is_some() { "compare-and-swap" } else { "fetch-and-add" };
        if !self.ia.attr.caps.contains(rmr_api::Caps::ATOMICS) {
            return Err(Error::Unsupported(what));
        }
        if self.state() == rmr_api::EpState::Connected && !self.atomics_ok.load(Ordering::Acquire) {
            return Err(Error::Unsupported(what));
        }
        if result.len != 8 {
            return Err(Error::invalid("an atomic's result segment must be 8 bytes"));
        }
        if (remote.addr + remote_offset) % 8 != 0 {
            return Err(Error::invalid("atomic target must be 8-byte aligned"));
        }
        let (iov, keep, _) = self.check_sges(&[result], Access::LOCAL_WRITE)?;
        let r = self.remote(remote, remote_offset, 8)?;
        let base = self.fence_flags(flags)?;
        let op = if compare.is_some() { DtoOp::CmpSwap } else { DtoOp::FetchAdd };
        let mut meta = self.user_meta(cookie, op, flags, 8, keep);
        let ops = Box::new([operand, compare.unwrap_or(0)]);
        let (p_op, p_cmp) = (&ops[0] as *const u64, &ops[1] as *const u64);
        meta.operand = Some(ops);
        meta.target = Some(r);
        meta.result = Some((result.lmr.region().clone(), result.lmr.offset() + result.offset));
        let res = iov[0];
        self.post_tx(
            meta,
            base,
            None,
            // SAFETY: the operand box and the result region live in the record until completion.
            &mut |ep, tok, fl, _, _| unsafe {
                msg::atomic(ep, p_op, compare.map(|_| p_cmp), res, r, tok, fl)
            },
            if compare.is_some() { "fi_compare_atomicmsg" } else { "fi_fetch_atomicmsg" },
        )
    }
}
