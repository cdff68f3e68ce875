//! Devices: discovery (`ibv_get_device_list`), the context rdma_cm bound an
//! address to, device and port limits, and asynchronous events.

use super::{errno, last_err, name_of};
use rdma_sys as ffi;
use rmr_api::{Error, Result};

/// Names of the RDMA devices present.
///
/// # Errors
/// [`Error::NoDevice`] saying what is missing: kernel uverbs support
/// (ENOSYS, as on machines without `ib_uverbs`), any device at all, or the
/// list itself.
pub(crate) fn device_names() -> Result<Vec<String>> {
    let mut n = 0i32;
    // SAFETY: n is a live out-parameter; the list is freed below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = errno();
        let what = match e {
            libc::ENOSYS => "the kernel has no RDMA userspace verbs support \
                (ibv_get_device_list: ENOSYS; load ib_uverbs and an RDMA driver, \
                or use rdma_rxe/siw over Ethernet)"
                .to_string(),
            _ => format!("ibv_get_device_list failed: {}", std::io::Error::from_raw_os_error(e)),
        };
        return Err(Error::NoDevice { what });
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds n valid device pointers.
        let dev = unsafe { *list.add(i) };
        if !dev.is_null() {
            // SAFETY: dev is a valid ibv_device of the live list.
            names.push(name_of(unsafe { &(*dev).name }));
        }
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    if names.is_empty() {
        return Err(Error::NoDevice {
            what: "no RDMA device found (ibv_get_device_list returned none; \
                is an RDMA driver loaded?)"
                .into(),
        });
    }
    Ok(names)
}

/// A device context owned by librdmacm (shared by every cm id bound to the
/// device; it lives while such an id exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Ctx(*mut ffi::ibv_context);

// SAFETY: libibverbs contexts are thread-safe (ibv_* calls may be made
// from any thread); the pointer is only dereferenced through them.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// Device and port limits read at open time.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) name: String,
    pub(crate) iwarp: bool,
    pub(crate) max_qp_wr: i32,
    pub(crate) max_sge: i32,
    pub(crate) max_cqe: i32,
    pub(crate) max_qp_rd_atom: i32,
    pub(crate) max_qp_init_rd_atom: i32,
    pub(crate) atomics: bool,
    pub(crate) max_msg_sz: u32,
    pub(crate) port_active: bool,
    pub(crate) active_width: u8,
    pub(crate) active_speed: u8,
}

impl Ctx {
    /// Wraps a context pointer taken from a bound cm id.
    ///
    /// # Safety
    /// `p` must be a valid context that outlives every use of the `Ctx`
    /// (the IA keeps the cm id it came from alive).
    pub(crate) unsafe fn from_raw(p: *mut ffi::ibv_context) -> Ctx {
        Ctx(p)
    }

    /// The raw pointer, for the other FFI files.
    pub(crate) fn raw(self) -> *mut ffi::ibv_context {
        self.0
    }

    /// The device's name.
    pub(crate) fn name(self) -> String {
        // SAFETY: a valid context has a valid device (Ctx invariant).
        name_of(unsafe { &(*(*self.0).device).name })
    }

    /// The async event fd.
    pub(crate) fn async_fd(self) -> i32 {
        // SAFETY: a valid context (Ctx invariant).
        unsafe { (*self.0).async_fd }
    }

    /// Queries the device and `port`.
    ///
    /// # Errors
    /// `Error::Backend` from ibv_query_device / ibv_query_port.
    pub(crate) fn limits(self, port: u8) -> Result<Limits> {
        let mut d = std::mem::MaybeUninit::<ffi::ibv_device_attr>::zeroed();
        // SAFETY: valid context; d is a live out-parameter of the right type.
        if unsafe { ffi::ibv_query_device(self.0, d.as_mut_ptr()) } != 0 {
            return Err(last_err("ibv_query_device"));
        }
        // SAFETY: zero-initialised plain C struct, filled by the call above.
        let d = unsafe { d.assume_init() };
        let mut p = std::mem::MaybeUninit::<ffi::ibv_port_attr>::zeroed();
        // SAFETY: valid context; p is a live out-parameter of the right type.
        if unsafe { ffi::___ibv_query_port(self.0, port, p.as_mut_ptr()) } != 0 {
            return Err(last_err("ibv_query_port"));
        }
        // SAFETY: zero-initialised plain C struct, filled by the call above.
        let p = unsafe { p.assume_init() };
        // SAFETY: a valid context has a valid device.
        let transport = unsafe { (*(*self.0).device).transport_type };
        Ok(Limits {
            name: self.name(),
            iwarp: transport == ffi::ibv_transport_type::IBV_TRANSPORT_IWARP,
            max_qp_wr: d.max_qp_wr,
            max_sge: d.max_sge,
            max_cqe: d.max_cqe,
            max_qp_rd_atom: d.max_qp_rd_atom,
            max_qp_init_rd_atom: d.max_qp_init_rd_atom,
            atomics: d.atomic_cap != ffi::ibv_atomic_cap::IBV_ATOMIC_NONE,
            max_msg_sz: p.max_msg_sz,
            port_active: p.state == ffi::ibv_port_state::IBV_PORT_ACTIVE,
            active_width: p.active_width,
            active_speed: p.active_speed,
        })
    }

    /// Reads one pending async event without blocking (the fd is set
    /// non-blocking by the IA).
    pub(crate) fn next_async(self) -> Option<AsyncEvent> {
        let mut ev = std::mem::MaybeUninit::<ffi::ibv_async_event>::zeroed();
        // SAFETY: valid context; ev is a live out-parameter.
        if unsafe { ffi::ibv_get_async_event(self.0, ev.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: filled by the successful call above.
        let ev = unsafe { ev.assume_init_mut() };
        use ffi::ibv_event_type as E;
        let kind = ev.event_type;
        let out = match kind {
            E::IBV_EVENT_QP_FATAL
            | E::IBV_EVENT_QP_REQ_ERR
            | E::IBV_EVENT_QP_ACCESS_ERR
            | E::IBV_EVENT_PATH_MIG_ERR => {
                // SAFETY: for QP events the element is the QP, valid until acked.
                let qp = unsafe { ev.element.qp };
                // SAFETY: as above.
                AsyncEvent::QpError { qp_num: unsafe { (*qp).qp_num }, what: format!("{kind:?}") }
            }
            E::IBV_EVENT_PORT_ERR => {
                // SAFETY: for port events the element is the port number.
                AsyncEvent::PortDown { port: unsafe { ev.element.port_num } as u8 }
            }
            E::IBV_EVENT_DEVICE_FATAL => AsyncEvent::DeviceFatal,
            E::IBV_EVENT_CQ_ERR => AsyncEvent::CqOverrun,
            _ => AsyncEvent::Info,
        };
        // SAFETY: acknowledges the event obtained above, once.
        unsafe { ffi::ibv_ack_async_event(ev) };
        Some(out)
    }
}

/// An asynchronous device event, copied out and acknowledged.
#[derive(Clone, Debug)]
pub(crate) enum AsyncEvent {
    /// A QP entered the error state.
    QpError { qp_num: u32, what: String },
    /// A port went down.
    PortDown { port: u8 },
    /// The device failed.
    DeviceFatal,
    /// A CQ overran: completions were lost.
    CqOverrun,
    /// Informational (port active, LID change, ...).
    Info,
}

/// The interface addresses of this host (for finding a device's IP).
pub(crate) fn local_ips() -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a live out-parameter; freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names.
            if let Some(sa) = unsafe { super::cm::sockaddr_to_std(ifa.ifa_addr) } {
                out.push(sa.ip());
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}
