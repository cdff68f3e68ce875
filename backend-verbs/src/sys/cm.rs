//! rdma_cm: the event channel and connection ids.

use super::device::Ctx;
use super::{errno, last_err};
use crate::cm_event::{CmEvent, CmKind};
use rdma_sys as ffi;
use rmr_api::{Error, Result};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Converts a C socket address to std.
///
/// # Safety
/// `sa` must point to a valid `sockaddr_in` or `sockaddr_in6` when its
/// family says so (any readable sockaddr otherwise).
pub(crate) unsafe fn sockaddr_to_std(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller guarantees a readable sockaddr.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: family AF_INET means a sockaddr_in.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(s.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: family AF_INET6 means a sockaddr_in6.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(s.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(s.sin6_port)))
        }
        _ => None,
    }
}

/// A std socket address as `sockaddr_storage`.
fn std_to_sockaddr(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let s = unsafe { &mut *(&raw mut st).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let s = unsafe { &mut *(&raw mut st).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_scope_id = v6.scope_id();
        }
    }
    st
}

/// An rdma_cm event channel (its fd is non-blocking).
pub(crate) struct EventChannel(*mut ffi::rdma_event_channel);

// SAFETY: librdmacm channels may be used from any thread.
unsafe impl Send for EventChannel {}
// SAFETY: as above; rdma_get_cm_event is thread-safe.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm`.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when the kernel has no rdma_cm (ENOENT, ENODEV, ENOSYS).
    pub(crate) fn create() -> Result<Arc<EventChannel>> {
        // SAFETY: plain constructor; null on failure.
        let c = unsafe { ffi::rdma_create_event_channel() };
        if c.is_null() {
            let e = errno();
            return Err(match e {
                libc::ENOENT | libc::ENODEV | libc::ENOSYS | libc::ENXIO => Error::NoDevice {
                    what: format!(
                        "rdma_cm is not available ({}; load rdma_ucm)",
                        std::io::Error::from_raw_os_error(e)
                    ),
                },
                _ => last_err("rdma_create_event_channel"),
            });
        }
        let ch = Arc::new(EventChannel(c));
        super::fd::set_nonblocking(ch.fd())?;
        Ok(ch)
    }

    /// The channel's fd.
    pub(crate) fn fd(&self) -> i32 {
        // SAFETY: the channel is valid until Drop.
        unsafe { (*self.0).fd }
    }

    /// Takes one event without blocking, copies it and acknowledges it.
    pub(crate) fn next(self: &Arc<Self>) -> Option<Incoming> {
        let mut ev: *mut ffi::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: valid channel; ev is a live out-parameter.
        if unsafe { ffi::rdma_get_cm_event(self.0, &mut ev) } != 0 {
            return None;
        }
        // SAFETY: a successful call gives a valid event until it is acked.
        let e = unsafe { &*ev };
        let kind = CmKind::from_raw(e.event);
        // SAFETY: the conn member is the one rdma_cm fills for RC (RDMA_PS_TCP) ids.
        let conn = unsafe { &e.param.conn };
        let carries_data = matches!(
            kind,
            CmKind::ConnectRequest
                | CmKind::ConnectResponse
                | CmKind::Established
                | CmKind::Rejected
        );
        let private_data =
            if !carries_data || conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                // SAFETY: private_data holds private_data_len bytes while the event is live.
                unsafe {
                    std::slice::from_raw_parts(
                        conn.private_data.cast::<u8>(),
                        conn.private_data_len as usize,
                    )
                }
                .to_vec()
            };
        let copy = CmEvent {
            kind,
            status: e.status,
            private_data,
            peer_rd: (conn.responder_resources, conn.initiator_depth),
        };
        let (id, listen) = (e.id as usize, e.listen_id as usize);
        // A request's id is new and ours to accept, reject and destroy.
        let new_id = (copy.kind == CmKind::ConnectRequest).then(|| CmId {
            raw: e.id,
            has_qp: false,
            _chan: self.clone(),
        });
        // SAFETY: acknowledges the event obtained above, once.
        unsafe { ffi::rdma_ack_cm_event(ev) };
        Some(Incoming { id, listen, event: copy, new_id })
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: every id holds an Arc of the channel, so none is left.
        unsafe { ffi::rdma_destroy_event_channel(self.0) };
    }
}

/// One event taken from the channel.
pub(crate) struct Incoming {
    /// The id it concerns (its address, the dispatch key).
    pub(crate) id: usize,
    /// The listening id, for connection requests.
    pub(crate) listen: usize,
    /// The copied event.
    pub(crate) event: CmEvent,
    /// The new id of a connection request.
    pub(crate) new_id: Option<CmId>,
}

/// An rdma_cm id (RDMA_PS_TCP) and the QP attached to it, if any.
pub(crate) struct CmId {
    raw: *mut ffi::rdma_cm_id,
    has_qp: bool,
    _chan: Arc<EventChannel>,
}

// SAFETY: rdma_cm ids may be driven from any thread; the backend serialises
// the calls on one id by the endpoint's state lock.
unsafe impl Send for CmId {}
// SAFETY: as above.
unsafe impl Sync for CmId {}

fn check(ret: i32, call: &str) -> Result<()> {
    if ret != 0 { Err(last_err(call)) } else { Ok(()) }
}

/// The parameters of `rdma_connect` / `rdma_accept`.
pub(crate) struct ConnArgs<'a> {
    pub(crate) private_data: &'a [u8],
    pub(crate) params: crate::qp_state::ConnParams,
}

fn conn_param(a: &ConnArgs<'_>) -> ffi::rdma_conn_param {
    ffi::rdma_conn_param {
        private_data: a.private_data.as_ptr().cast(),
        private_data_len: a.private_data.len().min(255) as u8,
        responder_resources: a.params.responder_resources,
        initiator_depth: a.params.initiator_depth,
        flow_control: 1,
        retry_count: a.params.retry_count,
        rnr_retry_count: a.params.rnr_retry_count,
        srq: 0,
        qp_num: 0,
    }
}

impl CmId {
    /// A new id on `chan`.
    ///
    /// # Errors
    /// `Error::Backend` from rdma_create_id.
    pub(crate) fn create(chan: &Arc<EventChannel>) -> Result<CmId> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid channel; raw is a live out-parameter.
        let r = unsafe {
            ffi::rdma_create_id(
                chan.0,
                &mut raw,
                std::ptr::null_mut(),
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        };
        check(r, "rdma_create_id")?;
        Ok(CmId { raw, has_qp: false, _chan: chan.clone() })
    }

    /// The id's address (the key events are dispatched by).
    pub(crate) fn key(&self) -> usize {
        self.raw as usize
    }

    /// Binds to `addr` (port 0 picks one).
    ///
    /// # Errors
    /// `Error::Io` (address in use, not local) from rdma_bind_addr.
    pub(crate) fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut st = std_to_sockaddr(&addr);
        // SAFETY: valid id; st is a live sockaddr of the family it names.
        let r = unsafe { ffi::rdma_bind_addr(self.raw, (&raw mut st).cast()) };
        if r != 0 {
            return Err(Error::io(
                format!("rdma_bind_addr {addr}"),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// The device context rdma_cm bound this id to (after bind/resolve).
    pub(crate) fn ctx(&self) -> Option<Ctx> {
        // SAFETY: valid id; reading its verbs field.
        let v = unsafe { (*self.raw).verbs };
        // SAFETY: a non-null verbs pointer is librdmacm's device context,
        // which stays open while this id exists (the IA keeps one).
        (!v.is_null()).then(|| unsafe { Ctx::from_raw(v) })
    }

    /// The port rdma_cm bound this id to.
    pub(crate) fn port_num(&self) -> u8 {
        // SAFETY: valid id.
        unsafe { (*self.raw).port_num }
    }

    /// The local address.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: valid id; the route's source address is a sockaddr in place.
        unsafe { sockaddr_to_std(ffi::rdma_get_local_addr(&*self.raw)) }
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: valid id; the route's destination address is a sockaddr in place.
        unsafe { sockaddr_to_std(ffi::rdma_get_peer_addr(&*self.raw)) }
    }

    /// Starts address resolution (ADDR_RESOLVED/ADDR_ERROR follows).
    ///
    /// # Errors
    /// `Error::Backend` from rdma_resolve_addr.
    pub(crate) fn resolve_addr(&self, src: SocketAddr, dst: SocketAddr, ms: i32) -> Result<()> {
        let (mut s, mut d) = (std_to_sockaddr(&src), std_to_sockaddr(&dst));
        // SAFETY: valid id; both sockaddrs are live for the call.
        let r = unsafe {
            ffi::rdma_resolve_addr(self.raw, (&raw mut s).cast(), (&raw mut d).cast(), ms)
        };
        check(r, "rdma_resolve_addr")
    }

    /// Starts route resolution (ROUTE_RESOLVED/ROUTE_ERROR follows).
    ///
    /// # Errors
    /// `Error::Backend` from rdma_resolve_route.
    pub(crate) fn resolve_route(&self, ms: i32) -> Result<()> {
        // SAFETY: valid id.
        check(unsafe { ffi::rdma_resolve_route(self.raw, ms) }, "rdma_resolve_route")
    }

    /// Listens.
    ///
    /// # Errors
    /// `Error::Backend` from rdma_listen.
    pub(crate) fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: valid, bound id.
        check(unsafe { ffi::rdma_listen(self.raw, backlog) }, "rdma_listen")
    }

    /// Creates the RC QP of this id on `pd` with the given CQs and sizes;
    /// returns the granted capabilities. rdma_cm moves it to INIT and later
    /// through RTR to RTS on connect/accept. Safe to call: verbs refuses to
    /// free a PD or CQ that a QP still uses (EBUSY), so the QP cannot
    /// outlive them.
    ///
    /// # Errors
    /// `Error::Backend` from rdma_create_qp.
    pub(crate) fn create_qp(
        &mut self,
        pd: &super::pd::Pd,
        send_cq: &super::cq::Cq,
        recv_cq: &super::cq::Cq,
        cap: ffi::ibv_qp_cap,
    ) -> Result<(super::qp::QpRef, ffi::ibv_qp_cap)> {
        // SAFETY: all-zero is a valid ibv_qp_init_attr; the fields below are set.
        let mut a: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = send_cq.raw();
        a.recv_cq = recv_cq.raw();
        a.cap = cap;
        a.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        a.sq_sig_all = 0;
        // SAFETY: valid id, PD and CQs of the same device; attributes live for the call.
        check(unsafe { ffi::rdma_create_qp(self.raw, pd.raw(), &mut a) }, "rdma_create_qp")?;
        self.has_qp = true;
        // SAFETY: rdma_create_qp succeeded, so id->qp is the new QP, owned by
        // this id; the endpoint drops its QpRef copies before the id.
        let qp = unsafe { super::qp::QpRef::from_raw((*self.raw).qp) };
        Ok((qp, a.cap))
    }

    /// `rdma_connect`.
    ///
    /// # Errors
    /// `Error::Backend`.
    pub(crate) fn connect(&self, a: &ConnArgs<'_>) -> Result<()> {
        let mut p = conn_param(a);
        // SAFETY: valid id; p and its private data live for the call.
        check(unsafe { ffi::rdma_connect(self.raw, &mut p) }, "rdma_connect")
    }

    /// `rdma_accept`.
    ///
    /// # Errors
    /// `Error::Backend`.
    pub(crate) fn accept(&self, a: &ConnArgs<'_>) -> Result<()> {
        let mut p = conn_param(a);
        // SAFETY: valid request id; p and its private data live for the call.
        check(unsafe { ffi::rdma_accept(self.raw, &mut p) }, "rdma_accept")
    }

    /// `rdma_reject`.
    ///
    /// # Errors
    /// `Error::Backend`.
    pub(crate) fn reject(&self, pd: &[u8]) -> Result<()> {
        // SAFETY: valid request id; pd lives for the call.
        let r = unsafe { ffi::rdma_reject(self.raw, pd.as_ptr().cast(), pd.len().min(255) as u8) };
        check(r, "rdma_reject")
    }

    /// `rdma_disconnect` (moves the QP to ERR and sends a DREQ).
    ///
    /// # Errors
    /// `Error::Backend`.
    pub(crate) fn disconnect(&self) -> Result<()> {
        // SAFETY: valid id.
        check(unsafe { ffi::rdma_disconnect(self.raw) }, "rdma_disconnect")
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is valid and dropped once; its QP (if any) first.
        // rdma_destroy_id waits until this id's events are acked, which the
        // IA's event thread does right after copying each one.
        unsafe {
            if self.has_qp {
                ffi::rdma_destroy_qp(self.raw);
            }
            ffi::rdma_destroy_id(self.raw);
        }
    }
}

/// The (device, port) rdma_cm binds `ip` to, if it is an RDMA address.
pub(crate) fn device_of(chan: &Arc<EventChannel>, ip: IpAddr) -> Option<(String, u8)> {
    let id = CmId::create(chan).ok()?;
    id.bind(SocketAddr::new(ip, 0)).ok()?;
    let ctx = id.ctx()?;
    Some((ctx.name(), id.port_num()))
}
