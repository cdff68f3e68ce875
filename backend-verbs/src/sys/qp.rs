//! Posting work requests (`ibv_post_send`, `ibv_post_recv`) and moving a
//! QP to the error state.

use crate::qp_state::{QpState, rc_transition};
use crate::wr::{LocalSeg, SendPlan};
use rdma_sys as ffi;
use smallvec::SmallVec;

/// A QP owned by its cm id (destroyed with it).
#[derive(Clone, Copy)]
pub(crate) struct QpRef(*mut ffi::ibv_qp);

// SAFETY: ibv_post_send/recv are thread-safe; the endpoint serialises posts.
unsafe impl Send for QpRef {}
// SAFETY: as above.
unsafe impl Sync for QpRef {}

fn sges(segs: &[LocalSeg]) -> SmallVec<[ffi::ibv_sge; 4]> {
    segs.iter().map(|s| ffi::ibv_sge { addr: s.addr, length: s.len, lkey: s.lkey }).collect()
}

impl QpRef {
    /// Wraps the QP of a cm id.
    ///
    /// # Safety
    /// `qp` must be valid for as long as any copy is used (the endpoint
    /// drops its copies before the cm id that owns the QP).
    pub(crate) unsafe fn from_raw(qp: *mut ffi::ibv_qp) -> QpRef {
        QpRef(qp)
    }

    /// The QP number.
    pub(crate) fn qp_num(self) -> u32 {
        // SAFETY: valid QP (QpRef invariant).
        unsafe { (*self.0).qp_num }
    }

    /// Posts one send-queue WR; returns the errno on failure (ENOMEM: full).
    pub(crate) fn post_send(self, plan: &SendPlan, wr_id: u64) -> Result<(), i32> {
        let mut sg = sges(&plan.segs);
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero unions).
        let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = if sg.is_empty() { std::ptr::null_mut() } else { sg.as_mut_ptr() };
        wr.num_sge = sg.len() as i32;
        wr.opcode = plan.opcode;
        wr.send_flags = plan.send_flags;
        if let Some(imm) = plan.imm {
            wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        if let Some(t) = plan.remote {
            use ffi::ibv_wr_opcode as Op;
            if plan.opcode == Op::IBV_WR_ATOMIC_FETCH_AND_ADD
                || plan.opcode == Op::IBV_WR_ATOMIC_CMP_AND_SWP
            {
                wr.wr.atomic = ffi::atomic_t {
                    remote_addr: t.addr,
                    compare_add: plan.compare_add,
                    swap: plan.swap,
                    rkey: t.rkey,
                };
            } else {
                wr.wr.rdma = ffi::rdma_t { remote_addr: t.addr, rkey: t.rkey };
            }
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; wr and its SGE array live for the call (inline
        // data is copied by the provider before it returns).
        match unsafe { ffi::ibv_post_send(self.0, &mut wr, &mut bad) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Posts one receive WR; returns the errno on failure.
    pub(crate) fn post_recv(self, segs: &[LocalSeg], wr_id: u64) -> Result<(), i32> {
        let mut sg = sges(segs);
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: if sg.is_empty() { std::ptr::null_mut() } else { sg.as_mut_ptr() },
            num_sge: sg.len() as i32,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: valid QP; wr and its SGE array live for the call.
        match unsafe { ffi::ibv_post_recv(self.0, &mut wr, &mut bad) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Moves the QP to ERR so every outstanding WR is flushed.
    pub(crate) fn to_error(self) {
        let t = rc_transition(QpState::Rts, QpState::Err).expect("ERR is reachable from anywhere");
        // SAFETY: all-zero is a valid ibv_qp_attr; only qp_state is read (mask).
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = QpState::Err.to_ibv();
        // SAFETY: valid QP; attribute and mask per the state table.
        unsafe { ffi::ibv_modify_qp(self.0, &mut a, t.required as i32) };
    }
}
