//! The RC queue-pair state machine (pure), after the IB spec and
//! `ibv_modify_qp(3)`: legal transitions, the attributes each one requires
//! and allows, which states accept and process work, and the connection
//! parameters handed to rdma_cm for the RTR/RTS transitions it performs.

use rdma_sys::{ibv_qp_attr_mask as M, ibv_qp_state as S};

/// A QP state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Just created.
    Reset,
    /// Initialised: receives may be posted, nothing is processed.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error (not used by RC, which goes to `Err`).
    Sqe,
    /// Error: every outstanding and new WR completes with a flush error.
    Err,
}

impl QpState {
    /// From `enum ibv_qp_state`.
    pub fn from_ibv(s: u32) -> Option<QpState> {
        Some(match s {
            S::IBV_QPS_RESET => QpState::Reset,
            S::IBV_QPS_INIT => QpState::Init,
            S::IBV_QPS_RTR => QpState::Rtr,
            S::IBV_QPS_RTS => QpState::Rts,
            S::IBV_QPS_SQD => QpState::Sqd,
            S::IBV_QPS_SQE => QpState::Sqe,
            S::IBV_QPS_ERR => QpState::Err,
            _ => return None,
        })
    }

    /// To `enum ibv_qp_state`.
    pub fn to_ibv(self) -> u32 {
        match self {
            QpState::Reset => S::IBV_QPS_RESET,
            QpState::Init => S::IBV_QPS_INIT,
            QpState::Rtr => S::IBV_QPS_RTR,
            QpState::Rts => S::IBV_QPS_RTS,
            QpState::Sqd => S::IBV_QPS_SQD,
            QpState::Sqe => S::IBV_QPS_SQE,
            QpState::Err => S::IBV_QPS_ERR,
        }
    }

    /// Receives may be posted (in `Err` they complete at once as flushed).
    pub fn accepts_recvs(self) -> bool {
        self != QpState::Reset
    }

    /// Sends are processed (posted sends in other states wait or flush).
    pub fn processes_sends(self) -> bool {
        self == QpState::Rts
    }
}

/// Attribute masks (`enum ibv_qp_attr_mask`) of one transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Attributes that must be given.
    pub required: u32,
    /// Attributes that may be given.
    pub optional: u32,
}

impl Transition {
    /// True when `mask` has every required and only allowed attributes.
    pub fn accepts(&self, mask: u32) -> bool {
        mask & self.required == self.required && mask & !(self.required | self.optional) == 0
    }
}

/// The transition `from -> to` of an RC QP, or `None` when it is illegal.
pub fn rc_transition(from: QpState, to: QpState) -> Option<Transition> {
    use QpState::*;
    let st = M::IBV_QP_STATE.0;
    let t = |required: u32, optional: u32| Some(Transition { required: st | required, optional });
    match (from, to) {
        (_, Reset) | (_, Err) => t(0, 0),
        (Reset, Init) => t(M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0, 0),
        (Init, Init) => t(0, M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_ACCESS_FLAGS.0),
        (Init, Rtr) => t(
            M::IBV_QP_AV.0
                | M::IBV_QP_PATH_MTU.0
                | M::IBV_QP_DEST_QPN.0
                | M::IBV_QP_RQ_PSN.0
                | M::IBV_QP_MAX_DEST_RD_ATOMIC.0
                | M::IBV_QP_MIN_RNR_TIMER.0,
            M::IBV_QP_ALT_PATH.0 | M::IBV_QP_ACCESS_FLAGS.0 | M::IBV_QP_PKEY_INDEX.0,
        ),
        (Rtr, Rts) => t(
            M::IBV_QP_SQ_PSN.0
                | M::IBV_QP_TIMEOUT.0
                | M::IBV_QP_RETRY_CNT.0
                | M::IBV_QP_RNR_RETRY.0
                | M::IBV_QP_MAX_QP_RD_ATOMIC.0,
            M::IBV_QP_CUR_STATE.0
                | M::IBV_QP_ACCESS_FLAGS.0
                | M::IBV_QP_MIN_RNR_TIMER.0
                | M::IBV_QP_ALT_PATH.0
                | M::IBV_QP_PATH_MIG_STATE.0,
        ),
        (Rts, Rts) => t(
            0,
            M::IBV_QP_CUR_STATE.0
                | M::IBV_QP_ACCESS_FLAGS.0
                | M::IBV_QP_MIN_RNR_TIMER.0
                | M::IBV_QP_ALT_PATH.0
                | M::IBV_QP_PATH_MIG_STATE.0,
        ),
        (Rts, Sqd) => t(0, M::IBV_QP_EN_SQD_ASYNC_NOTIFY.0),
        (Sqd, Rts) => t(
            0,
            M::IBV_QP_CUR_STATE.0
                | M::IBV_QP_ACCESS_FLAGS.0
                | M::IBV_QP_MIN_RNR_TIMER.0
                | M::IBV_QP_ALT_PATH.0
                | M::IBV_QP_PATH_MIG_STATE.0,
        ),
        _ => None,
    }
}

/// What happens to an endpoint's QP, as the backend sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// `rdma_create_qp` (it moves the QP to INIT).
    Created,
    /// `rdma_accept` returned (rdma_cm moved the QP through RTR to RTS).
    Accepted,
    /// `RDMA_CM_EVENT_ESTABLISHED` (the active side is now RTS).
    Established,
    /// A disconnect, a failed completion or a fatal async event.
    Failed,
}

/// The state after `ev`, following only legal transitions (an illegal one
/// — e.g. established before created — lands in `Err`).
pub fn apply(s: QpState, ev: QpEvent) -> QpState {
    use QpState::*;
    let path: &[QpState] = match (s, ev) {
        (Reset, QpEvent::Created) => &[Init],
        (Init, QpEvent::Accepted) | (Init, QpEvent::Established) => &[Rtr, Rts],
        (Rtr, QpEvent::Accepted) | (Rtr, QpEvent::Established) => &[Rts],
        (Rts, QpEvent::Accepted) | (Rts, QpEvent::Established) => &[],
        _ => &[Err],
    };
    let mut cur = s;
    for &next in path {
        if rc_transition(cur, next).is_none() {
            return Err;
        }
        cur = next;
    }
    cur
}

/// The RC parameters rdma_cm applies in the RTR/RTS transitions
/// (`struct rdma_conn_param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnParams {
    /// Incoming RDMA reads/atomics outstanding at once (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// Outgoing RDMA reads/atomics outstanding at once (`max_rd_atomic`).
    pub initiator_depth: u8,
    /// Transport retries (`retry_cnt`, at most 7).
    pub retry_count: u8,
    /// Receiver-not-ready retries (`rnr_retry`, 7 = infinite).
    pub rnr_retry_count: u8,
}

/// Parameters from the device limits (`max_qp_rd_atom`,
/// `max_qp_init_rd_atom`) and the configured retries; `peer` caps them by
/// what a connecting peer offered (passive side).
pub fn conn_params(
    max_qp_rd_atom: i32,
    max_qp_init_rd_atom: i32,
    retry: u8,
    rnr_retry: u8,
    peer: Option<(u8, u8)>,
) -> ConnParams {
    let cap = |v: i32| v.clamp(0, 16) as u8;
    let (mut rr, mut id) = (cap(max_qp_rd_atom), cap(max_qp_init_rd_atom));
    if let Some((peer_rr, peer_id)) = peer {
        // Our reads are served by the peer's responder resources, and vice versa.
        id = id.min(peer_rr);
        rr = rr.min(peer_id);
    }
    ConnParams {
        responder_resources: rr,
        initiator_depth: id,
        retry_count: retry.min(7),
        rnr_retry_count: rnr_retry.min(7),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::*;

    #[test]
    fn the_connect_path_is_legal_and_needs_its_attributes() {
        let init = rc_transition(Reset, Init).unwrap();
        let need = M::IBV_QP_STATE.0
            | M::IBV_QP_PKEY_INDEX.0
            | M::IBV_QP_PORT.0
            | M::IBV_QP_ACCESS_FLAGS.0;
        assert!(init.accepts(need));
        assert!(!init.accepts(need & !M::IBV_QP_PORT.0));
        assert!(!init.accepts(need | M::IBV_QP_SQ_PSN.0));
        let rtr = rc_transition(Init, Rtr).unwrap();
        assert!(rtr.required & M::IBV_QP_DEST_QPN.0 != 0);
        assert!(rtr.required & M::IBV_QP_AV.0 != 0);
        let rts = rc_transition(Rtr, Rts).unwrap();
        for a in [M::IBV_QP_SQ_PSN, M::IBV_QP_TIMEOUT, M::IBV_QP_RETRY_CNT, M::IBV_QP_RNR_RETRY] {
            assert!(rts.required & a.0 != 0);
        }
        assert!(rts.accepts(rts.required | M::IBV_QP_MIN_RNR_TIMER.0));
    }

    #[test]
    fn illegal_transitions_and_error_from_anywhere() {
        assert!(rc_transition(Reset, Rts).is_none());
        assert!(rc_transition(Init, Rts).is_none());
        assert!(rc_transition(Err, Rts).is_none());
        assert!(rc_transition(Rtr, Init).is_none());
        for s in [Reset, Init, Rtr, Rts, Sqd, Sqe, Err] {
            let t = rc_transition(s, Err).unwrap();
            assert!(t.accepts(M::IBV_QP_STATE.0));
            assert_eq!(QpState::from_ibv(s.to_ibv()), Some(s));
        }
        assert_eq!(QpState::from_ibv(42), None);
    }

    #[test]
    fn endpoint_events_walk_the_table() {
        let s = apply(Reset, QpEvent::Created);
        assert_eq!(s, Init);
        assert!(s.accepts_recvs() && !s.processes_sends());
        assert_eq!(apply(s, QpEvent::Accepted), Rts);
        assert_eq!(apply(s, QpEvent::Established), Rts);
        assert_eq!(apply(Rts, QpEvent::Established), Rts);
        assert!(apply(Rts, QpEvent::Established).processes_sends());
        assert_eq!(apply(Rts, QpEvent::Failed), Err);
        assert_eq!(apply(Reset, QpEvent::Established), Err);
        assert_eq!(apply(Err, QpEvent::Created), Err);
        assert!(Err.accepts_recvs() && !Err.processes_sends() && !Reset.accepts_recvs());
    }

    #[test]
    fn conn_params_respect_device_and_peer() {
        let p = conn_params(16, 16, 9, 7, None);
        assert_eq!(
            p,
            ConnParams {
                responder_resources: 16,
                initiator_depth: 16,
                retry_count: 7,
                rnr_retry_count: 7
            }
        );
        let p = conn_params(64, 4, 7, 3, None);
        assert_eq!((p.responder_resources, p.initiator_depth, p.rnr_retry_count), (16, 4, 3));
        let p = conn_params(16, 16, 7, 7, Some((2, 8)));
        assert_eq!((p.initiator_depth, p.responder_resources), (2, 8));
        assert_eq!(conn_params(-1, 0, 7, 7, None).responder_resources, 0);
    }
}
