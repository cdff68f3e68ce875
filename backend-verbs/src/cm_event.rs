//! rdma_cm events to endpoint steps and rmr events (pure).

use crate::private_data::{self, Ctrl, Kind};
use rdma_sys::rdma_cm_event_type as T;
use rmr_api::Error;

/// An `enum rdma_cm_event_type`, named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmKind {
    /// Address resolved.
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// Route resolved.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// A connection request at a listener.
    ConnectRequest,
    /// A reply for an id without a QP (unused: our ids own their QP).
    ConnectResponse,
    /// Connecting failed.
    ConnectError,
    /// The peer did not answer.
    Unreachable,
    /// Rejected by the peer (or by its CM: no listener).
    Rejected,
    /// Connected.
    Established,
    /// Disconnected (either side, or the peer's process went away).
    Disconnected,
    /// The device is being removed.
    DeviceRemoval,
    /// The address moved to another device.
    AddrChange,
    /// The id left time-wait.
    TimewaitExit,
    /// Anything else (multicast).
    Other(u32),
}

impl CmKind {
    /// From the raw event type.
    pub fn from_raw(t: u32) -> CmKind {
        match t {
            T::RDMA_CM_EVENT_ADDR_RESOLVED => CmKind::AddrResolved,
            T::RDMA_CM_EVENT_ADDR_ERROR => CmKind::AddrError,
            T::RDMA_CM_EVENT_ROUTE_RESOLVED => CmKind::RouteResolved,
            T::RDMA_CM_EVENT_ROUTE_ERROR => CmKind::RouteError,
            T::RDMA_CM_EVENT_CONNECT_REQUEST => CmKind::ConnectRequest,
            T::RDMA_CM_EVENT_CONNECT_RESPONSE => CmKind::ConnectResponse,
            T::RDMA_CM_EVENT_CONNECT_ERROR => CmKind::ConnectError,
            T::RDMA_CM_EVENT_UNREACHABLE => CmKind::Unreachable,
            T::RDMA_CM_EVENT_REJECTED => CmKind::Rejected,
            T::RDMA_CM_EVENT_ESTABLISHED => CmKind::Established,
            T::RDMA_CM_EVENT_DISCONNECTED => CmKind::Disconnected,
            T::RDMA_CM_EVENT_DEVICE_REMOVAL => CmKind::DeviceRemoval,
            T::RDMA_CM_EVENT_ADDR_CHANGE => CmKind::AddrChange,
            T::RDMA_CM_EVENT_TIMEWAIT_EXIT => CmKind::TimewaitExit,
            o => CmKind::Other(o),
        }
    }
}

/// One CM event as copied out before `rdma_ack_cm_event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmEvent {
    /// The event type.
    pub kind: CmKind,
    /// `event->status` (an errno or a CM reject reason).
    pub status: i32,
    /// The private data that came with it.
    pub private_data: Vec<u8>,
    /// The peer's `responder_resources` / `initiator_depth` (requests).
    pub peer_rd: (u8, u8),
}

/// What a connecting endpoint does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectStep {
    /// Address resolved: resolve the route.
    ResolveRoute,
    /// Route resolved: create the QP and `rdma_connect`.
    Connect,
    /// Connected; the peer's private data and control word.
    Established {
        /// The acceptor's private data.
        user: Vec<u8>,
        /// The acceptor's control word.
        ctrl: Ctrl,
    },
    /// Rejected by the peer's application.
    Rejected(Vec<u8>),
    /// No listener, unreachable, or another failure.
    Failed(String),
    /// Not for this stage (keep waiting).
    Ignore,
}

/// Maps an event seen while connecting.
pub fn connect_step(e: &CmEvent) -> ConnectStep {
    match e.kind {
        CmKind::AddrResolved => ConnectStep::ResolveRoute,
        CmKind::RouteResolved => ConnectStep::Connect,
        CmKind::Established => match private_data::decode(&e.private_data) {
            Some(d) if d.kind == Kind::Accept => {
                ConnectStep::Established { user: d.user, ctrl: d.ctrl }
            }
            // A peer that is not rmr: no header, no control word.
            _ => ConnectStep::Established { user: e.private_data.clone(), ctrl: Ctrl::default() },
        },
        // An application reject carries our header; a CM-generated one
        // (no listener on that service) does not.
        CmKind::Rejected => match private_data::decode(&e.private_data) {
            Some(d) if d.kind == Kind::Reject => ConnectStep::Rejected(d.user),
            _ => ConnectStep::Failed(format!(
                "connection refused (reject reason {}: no listener on that service?)",
                e.status
            )),
        },
        CmKind::AddrError => ConnectStep::Failed(format!(
            "address resolution failed ({})",
            std::io::Error::from_raw_os_error(e.status.abs())
        )),
        CmKind::RouteError => ConnectStep::Failed(format!(
            "route resolution failed ({})",
            std::io::Error::from_raw_os_error(e.status.abs())
        )),
        CmKind::Unreachable => {
            ConnectStep::Failed(format!("peer unreachable (status {})", e.status))
        }
        CmKind::ConnectError => ConnectStep::Failed(format!("connect error (status {})", e.status)),
        CmKind::DeviceRemoval => ConnectStep::Failed("RDMA device removed".into()),
        _ => ConnectStep::Ignore,
    }
}

/// The error a failed [`ConnectStep`] becomes.
pub fn connect_error(step: ConnectStep) -> Error {
    match step {
        ConnectStep::Rejected(private_data) => Error::Rejected { private_data },
        ConnectStep::Failed(why) => Error::io(
            "rdma_cm connect",
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, why),
        ),
        other => Error::Protocol(format!("unexpected connect step {other:?}")),
    }
}

/// How an established connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// Orderly: this side disconnected, or the peer said goodbye first.
    Disconnected,
    /// The peer vanished or the device failed.
    Broken(String),
}

/// Maps an event on an established endpoint. `we_closed`: this side called
/// disconnect; `goodbye`: the peer wrote its goodbye into our control word;
/// `peer_has_ctrl`: the peer advertised one (else every disconnect is orderly).
pub fn connected_event(
    e: &CmEvent,
    we_closed: bool,
    goodbye: bool,
    peer_has_ctrl: bool,
) -> Option<Closed> {
    match e.kind {
        CmKind::Disconnected if we_closed || goodbye || !peer_has_ctrl => {
            Some(Closed::Disconnected)
        }
        CmKind::Disconnected => Some(Closed::Broken(
            "peer disconnected without closing (process killed or link lost)".into(),
        )),
        CmKind::DeviceRemoval => Some(Closed::Broken("RDMA device removed".into())),
        CmKind::AddrChange => None,
        CmKind::ConnectError | CmKind::Unreachable => {
            Some(Closed::Broken(format!("connection failed (status {})", e.status)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: CmKind, status: i32, pd: Vec<u8>) -> CmEvent {
        CmEvent { kind, status, private_data: pd, peer_rd: (0, 0) }
    }

    #[test]
    fn raw_types_round_trip() {
        assert_eq!(CmKind::from_raw(T::RDMA_CM_EVENT_ESTABLISHED), CmKind::Established);
        assert_eq!(CmKind::from_raw(T::RDMA_CM_EVENT_CONNECT_REQUEST), CmKind::ConnectRequest);
        assert_eq!(CmKind::from_raw(T::RDMA_CM_EVENT_DISCONNECTED), CmKind::Disconnected);
        assert_eq!(CmKind::from_raw(99), CmKind::Other(99));
    }

    #[test]
    fn connecting_walks_resolve_route_connect() {
        assert_eq!(connect_step(&ev(CmKind::AddrResolved, 0, vec![])), ConnectStep::ResolveRoute);
        assert_eq!(connect_step(&ev(CmKind::RouteResolved, 0, vec![])), ConnectStep::Connect);
        let ctrl = Ctrl { addr: 0x1000, rkey: 5 };
        let mut pd = private_data::encode(Kind::Accept, ctrl, b"from-b").unwrap();
        pd.resize(196, 0);
        assert_eq!(
            connect_step(&ev(CmKind::Established, 0, pd)),
            ConnectStep::Established { user: b"from-b".to_vec(), ctrl }
        );
        assert_eq!(connect_step(&ev(CmKind::TimewaitExit, 0, vec![])), ConnectStep::Ignore);
    }

    #[test]
    fn application_reject_versus_refusal() {
        let pd = private_data::encode(Kind::Reject, Ctrl::default(), b"go away").unwrap();
        let s = connect_step(&ev(CmKind::Rejected, 28, pd));
        assert_eq!(s, ConnectStep::Rejected(b"go away".to_vec()));
        assert!(
            matches!(connect_error(s), Error::Rejected { private_data } if private_data == b"go away")
        );
        // The CM's own reject (invalid service id) has no header: refused.
        let s = connect_step(&ev(CmKind::Rejected, 8, vec![0; 148]));
        assert!(matches!(s, ConnectStep::Failed(_)));
        assert!(matches!(connect_error(s), Error::Io { .. }));
        assert!(matches!(
            connect_step(&ev(CmKind::Unreachable, -110, vec![])),
            ConnectStep::Failed(_)
        ));
        assert!(
            matches!(connect_step(&ev(CmKind::AddrError, -113, vec![])), ConnectStep::Failed(w) if w.contains("address"))
        );
    }

    #[test]
    fn orderly_close_versus_vanished_peer() {
        let d = ev(CmKind::Disconnected, 0, vec![]);
        assert_eq!(connected_event(&d, true, false, true), Some(Closed::Disconnected));
        assert_eq!(connected_event(&d, false, true, true), Some(Closed::Disconnected));
        assert!(matches!(connected_event(&d, false, false, true), Some(Closed::Broken(_))));
        assert_eq!(connected_event(&d, false, false, false), Some(Closed::Disconnected));
        let r = ev(CmKind::DeviceRemoval, 0, vec![]);
        assert!(matches!(connected_event(&r, true, true, true), Some(Closed::Broken(_))));
        assert_eq!(connected_event(&ev(CmKind::TimewaitExit, 0, vec![]), false, false, true), None);
    }
}
