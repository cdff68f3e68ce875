//! Completion queues with their completion channel (`ibv_create_cq`,
//! `ibv_req_notify_cq`, `ibv_get_cq_event`).

use super::device::Ctx;
use super::last_err;
use crate::completion::Wc;
use rdma_sys as ffi;
use rmr_api::Result;
use std::mem::MaybeUninit;

/// A CQ and its own completion channel (non-blocking fd).
pub(crate) struct Cq {
    cq: *mut ffi::ibv_cq,
    chan: *mut ffi::ibv_comp_channel,
}

// SAFETY: CQ calls are thread-safe in libibverbs; the EVD serialises polling.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// Creates a channel and a CQ of at least `depth` entries on `ctx`.
    ///
    /// # Errors
    /// `Error::Backend` from the verbs calls.
    pub(crate) fn create(ctx: Ctx, depth: i32) -> Result<Cq> {
        // SAFETY: a valid context (Ctx invariant).
        let chan = unsafe { ffi::ibv_create_comp_channel(ctx.raw()) };
        if chan.is_null() {
            return Err(last_err("ibv_create_comp_channel"));
        }
        // SAFETY: valid context and channel.
        let cq = unsafe { ffi::ibv_create_cq(ctx.raw(), depth, std::ptr::null_mut(), chan, 0) };
        if cq.is_null() {
            let e = last_err("ibv_create_cq");
            // SAFETY: the channel was created above and has no CQ.
            unsafe { ffi::ibv_destroy_comp_channel(chan) };
            return Err(e);
        }
        let c = Cq { cq, chan };
        // SAFETY: valid channel.
        super::fd::set_nonblocking(unsafe { (*chan).fd })?;
        Ok(c)
    }

    /// The raw CQ, for QP creation.
    pub(crate) fn raw(&self) -> *mut ffi::ibv_cq {
        self.cq
    }

    /// The channel fd (readable after an armed CQ got a completion).
    pub(crate) fn fd(&self) -> i32 {
        // SAFETY: valid channel until drop.
        unsafe { (*self.chan).fd }
    }

    /// Current capacity.
    pub(crate) fn capacity(&self) -> i32 {
        // SAFETY: valid CQ.
        unsafe { (*self.cq).cqe }
    }

    /// Grows the CQ to at least `n` entries.
    ///
    /// # Errors
    /// `Error::Backend` from ibv_resize_cq.
    pub(crate) fn resize(&self, n: i32) -> Result<()> {
        // SAFETY: valid CQ; the caller holds the EVD lock (no concurrent poll).
        if unsafe { ffi::ibv_resize_cq(self.cq, n) } != 0 {
            return Err(last_err("ibv_resize_cq"));
        }
        Ok(())
    }

    /// Polls up to 32 completions into `out`; returns how many.
    pub(crate) fn poll(&self, out: &mut Vec<Wc>) -> usize {
        let mut wcs: [MaybeUninit<ffi::ibv_wc>; 32] = [const { MaybeUninit::uninit() }; 32];
        // SAFETY: valid CQ; wcs has room for 32 entries of the right type.
        let n = unsafe { ffi::ibv_poll_cq(self.cq, 32, wcs.as_mut_ptr().cast()) };
        let n = n.max(0) as usize;
        for w in &wcs[..n] {
            // SAFETY: the first n entries were written by ibv_poll_cq.
            let w = unsafe { w.assume_init_ref() };
            let with_imm = w.wc_flags & ffi::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
            out.push(Wc {
                wr_id: w.wr_id,
                status: w.status,
                opcode: w.opcode,
                byte_len: w.byte_len,
                // SAFETY: imm_data is the member in use when IBV_WC_WITH_IMM is set.
                imm: with_imm
                    .then(|| u32::from_be(unsafe { w.imm_data_invalidated_rkey_union.imm_data })),
                qp_num: w.qp_num,
                vendor_err: w.vendor_err,
            });
        }
        n
    }

    /// Arms the CQ: the next completion makes the channel fd readable.
    pub(crate) fn arm(&self) {
        // SAFETY: valid CQ.
        unsafe { ffi::ibv_req_notify_cq(self.cq, 0) };
    }

    /// Consumes and acknowledges the pending channel events (non-blocking).
    pub(crate) fn consume_events(&self) {
        let mut n = 0u32;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut ctx = std::ptr::null_mut();
            // SAFETY: valid channel (non-blocking fd); out-parameters are live.
            if unsafe { ffi::ibv_get_cq_event(self.chan, &mut cq, &mut ctx) } != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: acknowledges exactly the n events obtained above on our only CQ.
            unsafe { ffi::ibv_ack_cq_events(self.cq, n) };
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.consume_events();
        // SAFETY: no QP uses the CQ any more (endpoints hold their EVDs);
        // every channel event was acked; each object is destroyed once.
        unsafe {
            ffi::ibv_destroy_cq(self.cq);
            ffi::ibv_destroy_comp_channel(self.chan);
        }
    }
}
