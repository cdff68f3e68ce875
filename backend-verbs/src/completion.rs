//! Work completions to rmr completions (pure): `ibv_wc_status` to
//! [`Status`], receive opcodes to [`DtoOp`], immediate data and the
//! solicited mark.

use crate::wr::SOLICITED_MARK;
use rdma_sys::{ibv_wc_opcode as O, ibv_wc_status as S};
use rmr_api::{DtoOp, Status};

/// The fields of a `struct ibv_wc` this backend reads, copied out of the CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// `wr_id` (see [`crate::wr::encode_wr_id`]).
    pub wr_id: u64,
    /// `ibv_wc_status`.
    pub status: u32,
    /// `ibv_wc_opcode` (undefined unless `status` is success).
    pub opcode: u32,
    /// Bytes received (receives only).
    pub byte_len: u32,
    /// Immediate data, already in host order, when `IBV_WC_WITH_IMM` was set.
    pub imm: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// Vendor syndrome, for messages.
    pub vendor_err: u32,
}

/// Maps a work completion status to an rmr status. `op` is the operation
/// the WR was (known from the tracker, since the opcode of a failed
/// completion is undefined).
pub fn map_status(status: u32, op: DtoOp) -> Status {
    let recv = matches!(op, DtoOp::Recv | DtoOp::RecvWriteImm);
    match status {
        S::IBV_WC_SUCCESS => Status::Success,
        S::IBV_WC_WR_FLUSH_ERR => Status::Flushed,
        // Receiver: the message did not fit the posted buffer.
        S::IBV_WC_LOC_LEN_ERR if recv => Status::RecvTooSmall,
        S::IBV_WC_LOC_LEN_ERR => Status::OutOfBounds,
        S::IBV_WC_LOC_PROT_ERR | S::IBV_WC_LOC_ACCESS_ERR | S::IBV_WC_MW_BIND_ERR => {
            Status::Protection
        }
        S::IBV_WC_LOC_RDD_VIOL_ERR => Status::Protection,
        // The target refused the key, the rights, the PZ or the range.
        S::IBV_WC_REM_ACCESS_ERR | S::IBV_WC_REM_INV_RD_REQ_ERR => Status::RemoteAccess,
        // Invalid request at the target: a send longer than its receive
        // buffer, or a malformed one-sided request (length, alignment).
        S::IBV_WC_REM_INV_REQ_ERR if op == DtoOp::Send => Status::RecvTooSmall,
        S::IBV_WC_REM_INV_REQ_ERR => Status::OutOfBounds,
        S::IBV_WC_RNR_RETRY_EXC_ERR => Status::ReceiverNotReady,
        S::IBV_WC_REM_OP_ERR if recv => Status::Broken,
        S::IBV_WC_REM_OP_ERR => Status::RemoteAccess,
        // Retries exhausted, bad responses, fatal and unknown errors: the
        // connection is gone.
        _ => Status::Broken,
    }
}

/// True when the completion leaves the QP in the error state (every error
/// but a flush, which means it was already there).
pub fn breaks_qp(status: u32) -> bool {
    status != S::IBV_WC_SUCCESS && status != S::IBV_WC_WR_FLUSH_ERR
}

/// Words for a failed completion, for the Broken event.
pub fn describe(status: u32, vendor_err: u32) -> String {
    let name = match status {
        S::IBV_WC_LOC_LEN_ERR => "local length error",
        S::IBV_WC_LOC_QP_OP_ERR => "local QP operation error",
        S::IBV_WC_LOC_PROT_ERR => "local protection error",
        S::IBV_WC_WR_FLUSH_ERR => "flushed",
        S::IBV_WC_LOC_ACCESS_ERR => "local access error",
        S::IBV_WC_REM_INV_REQ_ERR => "remote invalid request",
        S::IBV_WC_REM_ACCESS_ERR => "remote access error",
        S::IBV_WC_REM_OP_ERR => "remote operation error",
        S::IBV_WC_RETRY_EXC_ERR => "transport retries exceeded (peer unreachable)",
        S::IBV_WC_RNR_RETRY_EXC_ERR => "receiver-not-ready retries exceeded",
        S::IBV_WC_BAD_RESP_ERR => "bad response",
        S::IBV_WC_FATAL_ERR => "fatal error",
        S::IBV_WC_RESP_TIMEOUT_ERR => "response timeout",
        _ => "work completion error",
    };
    format!("{name} (ibv_wc_status {status}, vendor syndrome {vendor_err:#x})")
}

/// What a receive completion reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvInfo {
    /// `Recv` or `RecvWriteImm`.
    pub op: DtoOp,
    /// Mapped status.
    pub status: Status,
    /// Bytes received.
    pub bytes: u64,
    /// Immediate data of a write-with-immediate.
    pub imm: Option<u64>,
    /// The sender set SOLICITED (carried as [`SOLICITED_MARK`] on a send).
    pub solicited: bool,
}

/// Decodes a receive completion.
pub fn recv_info(wc: &Wc) -> RecvInfo {
    if wc.status != S::IBV_WC_SUCCESS {
        return RecvInfo {
            op: DtoOp::Recv,
            status: map_status(wc.status, DtoOp::Recv),
            bytes: 0,
            imm: None,
            solicited: false,
        };
    }
    match wc.opcode {
        O::IBV_WC_RECV_RDMA_WITH_IMM => RecvInfo {
            op: DtoOp::RecvWriteImm,
            status: Status::Success,
            bytes: u64::from(wc.byte_len),
            imm: wc.imm.map(u64::from),
            solicited: false,
        },
        _ => RecvInfo {
            op: DtoOp::Recv,
            status: Status::Success,
            bytes: u64::from(wc.byte_len),
            imm: None,
            solicited: wc.imm == Some(SOLICITED_MARK),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(status: u32, opcode: u32, byte_len: u32, imm: Option<u32>) -> Wc {
        Wc { wr_id: 1, status, opcode, byte_len, imm, qp_num: 9, vendor_err: 0 }
    }

    #[test]
    fn statuses_map_to_rmr() {
        let cases = [
            (S::IBV_WC_SUCCESS, DtoOp::Send, Status::Success),
            (S::IBV_WC_WR_FLUSH_ERR, DtoOp::Recv, Status::Flushed),
            (S::IBV_WC_WR_FLUSH_ERR, DtoOp::RdmaWrite, Status::Flushed),
            (S::IBV_WC_LOC_LEN_ERR, DtoOp::Recv, Status::RecvTooSmall),
            (S::IBV_WC_LOC_LEN_ERR, DtoOp::Send, Status::OutOfBounds),
            (S::IBV_WC_REM_INV_REQ_ERR, DtoOp::Send, Status::RecvTooSmall),
            (S::IBV_WC_REM_INV_REQ_ERR, DtoOp::FetchAdd, Status::OutOfBounds),
            (S::IBV_WC_REM_ACCESS_ERR, DtoOp::RdmaWrite, Status::RemoteAccess),
            (S::IBV_WC_REM_ACCESS_ERR, DtoOp::RdmaRead, Status::RemoteAccess),
            (S::IBV_WC_REM_INV_RD_REQ_ERR, DtoOp::RdmaRead, Status::RemoteAccess),
            (S::IBV_WC_LOC_PROT_ERR, DtoOp::Send, Status::Protection),
            (S::IBV_WC_LOC_ACCESS_ERR, DtoOp::RdmaRead, Status::Protection),
            (S::IBV_WC_RNR_RETRY_EXC_ERR, DtoOp::Send, Status::ReceiverNotReady),
            (S::IBV_WC_RETRY_EXC_ERR, DtoOp::RdmaWrite, Status::Broken),
            (S::IBV_WC_FATAL_ERR, DtoOp::Recv, Status::Broken),
            (S::IBV_WC_REM_OP_ERR, DtoOp::CmpSwap, Status::RemoteAccess),
            (999, DtoOp::Send, Status::Broken),
        ];
        for (s, op, want) in cases {
            assert_eq!(map_status(s, op), want, "status {s} op {op:?}");
        }
        assert!(!breaks_qp(S::IBV_WC_SUCCESS));
        assert!(!breaks_qp(S::IBV_WC_WR_FLUSH_ERR));
        assert!(breaks_qp(S::IBV_WC_REM_ACCESS_ERR));
        assert!(describe(S::IBV_WC_RETRY_EXC_ERR, 0x81).contains("0x81"));
    }

    #[test]
    fn receive_completions() {
        let r = recv_info(&wc(0, O::IBV_WC_RECV, 256, None));
        assert_eq!(
            (r.op, r.status, r.bytes, r.imm, r.solicited),
            (DtoOp::Recv, Status::Success, 256, None, false)
        );
        let r = recv_info(&wc(0, O::IBV_WC_RECV, 8, Some(SOLICITED_MARK)));
        assert!(r.solicited && r.imm.is_none());
        let r = recv_info(&wc(0, O::IBV_WC_RECV_RDMA_WITH_IMM, 0, Some(0xC0FFEE)));
        assert_eq!((r.op, r.imm, r.solicited), (DtoOp::RecvWriteImm, Some(0xC0FFEE), false));
        let r = recv_info(&wc(S::IBV_WC_LOC_LEN_ERR, 12345, 0, None));
        assert_eq!((r.op, r.status), (DtoOp::Recv, Status::RecvTooSmall));
        let r = recv_info(&wc(S::IBV_WC_WR_FLUSH_ERR, 0, 0, None));
        assert_eq!(r.status, Status::Flushed);
    }
}
