//! The FFI layer: owned libfabric handles and the few calls the backend
//! makes, each wrapped once with its `// SAFETY:` argument. Nothing outside
//! this module (and [`crate::msg`]) touches a raw pointer.
//!
//! Every handle closes itself on drop and keeps its parent alive with an
//! `Arc` (an endpoint its domain, EQ and CQs; a CQ its domain; a domain its
//! fabric), so libfabric's close order (children first) always holds.

use crate::sockaddr::{parse_sockaddr, sockaddr_bytes};
use ofi_sys as sys;
use rmr_api::{Error, Result};
use std::ffi::{CStr, CString, c_void};
use std::net::SocketAddr;
use std::ptr::{NonNull, null, null_mut};
use std::sync::{Arc, Mutex, MutexGuard};

/// The libfabric API version the backend asks for: the headers' own.
pub(crate) fn api_version() -> u32 {
    // SAFETY: a pure function of compile-time constants in the shim.
    unsafe { sys::rfi_header_version() }
}

/// `fi_strerror` text for a (positive) libfabric errno.
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string for any value.
    let p = unsafe { sys::fi_strerror(errno.abs()) };
    if p.is_null() {
        return format!("libfabric error {errno}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The rmr error for a failed libfabric call: the call's name and fi_strerror text.
pub(crate) fn fi_error(call: &str, ret: isize) -> Error {
    Error::Backend { call: call.into(), msg: format!("{} ({ret})", strerror(ret as i32)) }
}

fn check(call: &str, ret: i32) -> Result<()> {
    if ret < 0 { Err(fi_error(call, ret as isize)) } else { Ok(()) }
}

/// `-FI_EAGAIN` as returned by data calls.
pub(crate) const EAGAIN: isize = -(sys::FI_EAGAIN as isize);
/// `-FI_EAVAIL`: an error entry is waiting in a CQ or EQ.
pub(crate) const EAVAIL: isize = -(sys::FI_EAVAIL as isize);

/// What the backend asks fi_getinfo for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hints {
    /// libfabric provider name (`tcp`, `sockets`, `verbs`), or any.
    pub(crate) prov: Option<String>,
    /// Primary and secondary capabilities.
    pub(crate) caps: u64,
    /// Memory registration modes the backend can handle.
    pub(crate) mr_mode: i32,
    /// Message ordering asked for on both queues.
    pub(crate) msg_order: u64,
    /// Local address to bind to.
    pub(crate) src: Option<SocketAddr>,
    /// Work queue sizes asked for (0: provider default).
    pub(crate) tx_size: usize,
    /// Receive queue size asked for (0: provider default).
    pub(crate) rx_size: usize,
}

/// An owned `fi_info` list (freed with `fi_freeinfo`).
pub(crate) struct Info(NonNull<sys::fi_info>);

// SAFETY: an fi_info is plain data owned by this handle; libfabric reads it
// only during calls that take it, which we serialise through &self.
unsafe impl Send for Info {}
// SAFETY: as above; no interior mutation after construction.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: we own the list; it was allocated by libfabric.
        unsafe { sys::fi_freeinfo(self.0.as_ptr()) };
    }
}

fn strdup(s: &str) -> Result<*mut libc::c_char> {
    let c = CString::new(s).map_err(|_| Error::invalid("NUL in a string for libfabric"))?;
    // SAFETY: c is a valid C string; the copy is owned by the fi_info (freed by fi_freeinfo).
    Ok(unsafe { libc::strdup(c.as_ptr()) })
}

impl Info {
    /// `fi_getinfo(node, service, flags, hints)`, the first match only.
    pub(crate) fn get(
        h: &Hints,
        node: Option<&str>,
        service: Option<&str>,
        source: bool,
    ) -> Result<Info> {
        // SAFETY: fi_allocinfo returns a zeroed fi_info with allocated sub-attributes.
        let hints = NonNull::new(unsafe { sys::rfi_allocinfo() })
            .ok_or_else(|| Error::Backend { call: "fi_allocinfo".into(), msg: "ENOMEM".into() })?;
        let hints = Info(hints);
        // SAFETY: hints and its attribute structs were allocated by fi_allocinfo and are
        // exclusively ours; strings are malloc'd copies freed by fi_freeinfo.
        unsafe {
            let i = hints.0.as_ptr();
            (*i).caps = h.caps;
            (*i).mode = sys::FI_RX_CQ_DATA as u64;
            (*(*i).ep_attr).type_ = sys::FI_EP_MSG;
            (*(*i).domain_attr).mr_mode = h.mr_mode;
            (*(*i).domain_attr).threading = sys::FI_THREAD_SAFE;
            (*(*i).domain_attr).data_progress = sys::FI_PROGRESS_AUTO;
            (*(*i).domain_attr).control_progress = sys::FI_PROGRESS_AUTO;
            (*(*i).tx_attr).msg_order = h.msg_order;
            (*(*i).rx_attr).msg_order = h.msg_order;
            (*(*i).tx_attr).size = h.tx_size;
            (*(*i).rx_attr).size = h.rx_size;
            if let Some(p) = &h.prov {
                (*(*i).fabric_attr).prov_name = strdup(p)?;
            }
            if let Some(src) = h.src {
                let b = sockaddr_bytes(src);
                let m = libc::malloc(b.len()).cast::<u8>();
                if m.is_null() {
                    return Err(Error::Backend { call: "malloc".into(), msg: "ENOMEM".into() });
                }
                std::ptr::copy_nonoverlapping(b.as_ptr(), m, b.len());
                (*i).src_addr = m.cast();
                (*i).src_addrlen = b.len();
                (*i).addr_format =
                    if src.is_ipv4() { sys::FI_SOCKADDR_IN } else { sys::FI_SOCKADDR_IN6 };
            }
        }
        let node_c = node.map(CString::new).transpose().map_err(|_| Error::invalid("NUL"))?;
        let svc_c = service.map(CString::new).transpose().map_err(|_| Error::invalid("NUL"))?;
        let mut out: *mut sys::fi_info = null_mut();
        // SAFETY: all pointers are valid for the call or null; `out` receives an owned list.
        let ret = unsafe {
            sys::fi_getinfo(
                api_version(),
                node_c.as_ref().map_or(null(), |c| c.as_ptr()),
                svc_c.as_ref().map_or(null(), |c| c.as_ptr()),
                if source { sys::FI_SOURCE as u64 } else { 0 },
                hints.0.as_ptr(),
                &mut out,
            )
        };
        check("fi_getinfo", ret)?;
        let out = NonNull::new(out).ok_or_else(|| Error::Backend {
            call: "fi_getinfo".into(),
            msg: "no provider matched".into(),
        })?;
        let list = Info(out);
        // Keep only the first (best) entry.
        // SAFETY: list is ours; fi_dupinfo deep-copies one entry (its `next` is not followed).
        let first = unsafe { sys::fi_dupinfo(list.0.as_ptr()) };
        NonNull::new(first)
            .map(Info)
            .ok_or_else(|| Error::Backend { call: "fi_dupinfo".into(), msg: "ENOMEM".into() })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::fi_info {
        self.0.as_ptr()
    }

    /// Takes ownership of an fi_info libfabric handed to us (a CONNREQ's).
    ///
    /// # Safety
    /// `p` must be an fi_info the caller owns and nobody else frees.
    pub(crate) unsafe fn from_raw(p: *mut sys::fi_info) -> Option<Info> {
        NonNull::new(p).map(Info)
    }

    fn r(&self) -> &sys::fi_info {
        // SAFETY: the pointer is valid for our lifetime.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn caps(&self) -> u64 {
        self.r().caps
    }

    pub(crate) fn prov_name(&self) -> String {
        // SAFETY: fabric_attr is allocated for every info libfabric returns; name may be null.
        unsafe {
            let f = self.r().fabric_attr;
            if f.is_null() || (*f).prov_name.is_null() {
                return String::new();
            }
            CStr::from_ptr((*f).prov_name).to_string_lossy().into_owned()
        }
    }

    pub(crate) fn domain_attr(&self) -> &sys::fi_domain_attr {
        // SAFETY: domain_attr is allocated for every info libfabric returns.
        unsafe { &*self.r().domain_attr }
    }

    pub(crate) fn ep_attr(&self) -> &sys::fi_ep_attr {
        // SAFETY: ep_attr is allocated for every info libfabric returns.
        unsafe { &*self.r().ep_attr }
    }

    pub(crate) fn tx_attr(&self) -> &sys::fi_tx_attr {
        // SAFETY: tx_attr is allocated for every info libfabric returns.
        unsafe { &*self.r().tx_attr }
    }

    pub(crate) fn rx_attr(&self) -> &sys::fi_rx_attr {
        // SAFETY: rx_attr is allocated for every info libfabric returns.
        unsafe { &*self.r().rx_attr }
    }

    pub(crate) fn src_addr(&self) -> Option<SocketAddr> {
        let r = self.r();
        if r.src_addr.is_null() {
            return None;
        }
        // SAFETY: src_addr points to src_addrlen bytes.
        parse_sockaddr(unsafe {
            std::slice::from_raw_parts(r.src_addr.cast::<u8>(), r.src_addrlen)
        })
    }

    pub(crate) fn dest_addr(&self) -> Option<SocketAddr> {
        let r = self.r();
        if r.dest_addr.is_null() {
            return None;
        }
        // SAFETY: dest_addr points to dest_addrlen bytes.
        parse_sockaddr(unsafe {
            std::slice::from_raw_parts(r.dest_addr.cast::<u8>(), r.dest_addrlen)
        })
    }

    pub(crate) fn handle(&self) -> *mut sys::fid {
        self.r().handle
    }
}

macro_rules! handle {
    ($(#[$m:meta])* $name:ident, $t:ty, $what:literal { $($keep:ident : $kt:ty),* } $(closes under $gate:ident)?) => {
        $(#[$m])*
        pub(crate) struct $name {
            ptr: NonNull<$t>,
            $(#[allow(dead_code)] $keep: $kt,)*
        }
        // SAFETY: the domain is opened FI_THREAD_SAFE: libfabric serialises
        // concurrent calls on one object itself.
        unsafe impl Send for $name {}
        // SAFETY: as above.
        unsafe impl Sync for $name {}
        impl $name {
            pub(crate) fn raw(&self) -> *mut $t {
                self.ptr.as_ptr()
            }
            pub(crate) fn fid(&self) -> *mut sys::fid {
                // SAFETY: every libfabric object starts with its `struct fid`.
                unsafe { &raw mut (*self.ptr.as_ptr()).fid }
            }
        }
        impl Drop for $name {
            fn drop(&mut self) {
                $(let _gate = self.$gate.close_gate();)?
                // SAFETY: we own the object; children hold an Arc of us, so none is left.
                let ret = unsafe { sys::rfi_close(self.fid()) };
                if ret < 0 {
                    tracing::debug!(target: "rmr::ofi", what = $what, error = %strerror(ret), "fi_close failed");
                }
            }
        }
    };
}

handle!(
    /// A fabric (`fi_fabric`).
    Fabric, sys::fid_fabric, "fabric" {}
);
handle!(
    /// A domain (`fi_domain`): one protection zone.
    Domain, sys::fid_domain, "domain" { fabric: Arc<Fabric> }
);
handle!(
    /// An event queue (`fi_eq_open`) for connection events. `wait` is its
    /// wait fd when it is read under `gate` (see [`Eq::open`]).
    Eq, sys::fid_eq, "eq" { fabric: Arc<Fabric>, gate: Mutex<()>, wait: Option<i32> }
);
handle!(
    /// A completion queue (`fi_cq_open`).
    Cq, sys::fid_cq, "cq" { domain: Arc<Domain>, wait: CqWait }
);
handle!(
    /// A passive endpoint (`fi_passive_ep`).
    Pep, sys::fid_pep, "pep" { fabric: Arc<Fabric>, eq: Arc<Eq>, info: Info }
);
handle!(
    /// A connected (or connecting) endpoint (`fi_endpoint`).
    EpH, sys::fid_ep, "ep" { domain: Arc<Domain>, eq: Arc<Eq>, cqs: Vec<Arc<Cq>>, info: Info }
    closes under eq
);
handle!(
    /// A memory registration (`fi_mr_reg`).
    Mr, sys::fid_mr, "mr" { domain: Arc<Domain> }
);

impl Fabric {
    pub(crate) fn open(info: &Info) -> Result<Arc<Fabric>> {
        let mut f: *mut sys::fid_fabric = null_mut();
        // SAFETY: fabric_attr comes from fi_getinfo; `f` receives a new object.
        let ret = unsafe { sys::fi_fabric((*info.as_ptr()).fabric_attr, &mut f, null_mut()) };
        check("fi_fabric", ret)?;
        Ok(Arc::new(Fabric { ptr: NonNull::new(f).expect("fi_fabric set the fabric") }))
    }

    /// `fi_trywait` on one CQ: true when it is safe to block on its wait fd.
    pub(crate) fn trywait(&self, cq: &Cq) -> i32 {
        let mut fids = [cq.fid()];
        // SAFETY: fids holds one live fid of this fabric.
        unsafe { sys::rfi_trywait(self.raw(), fids.as_mut_ptr(), 1) }
    }
}

impl Domain {
    pub(crate) fn open(fabric: &Arc<Fabric>, info: &Info) -> Result<Arc<Domain>> {
        let mut d: *mut sys::fid_domain = null_mut();
        // SAFETY: fabric is live, info from fi_getinfo.
        let ret = unsafe { sys::rfi_domain(fabric.raw(), info.as_ptr(), &mut d, null_mut()) };
        check("fi_domain", ret)?;
        Ok(Arc::new(Domain {
            ptr: NonNull::new(d).expect("fi_domain set the domain"),
            fabric: fabric.clone(),
        }))
    }
}

impl Eq {
    /// Opens the IA's event queue. With `gated`, the queue is read only
    /// while no endpoint bound to it closes: the `sockets` provider's
    /// endpoint close takes the endpoint's events out of the queue, and
    /// its event read looks at the queue's list before it takes the lock
    /// that close holds, so a read racing a close takes an entry from an
    /// emptied list and frees a pointer into the queue itself (libfabric
    /// 1.17 to at least 2.6). Such a queue is waited on through its fd
    /// (`FI_WAIT_FD`: set when an event or error is queued, cleared when a
    /// read or a close leaves no plain event queued, errors queued or not)
    /// outside the gate and read without blocking inside it, again after
    /// each event and once a slice whatever the fd says (`eq::EqReader`).
    /// A close waits for at most one non-blocking read; closes of one IA's
    /// endpoints run one at a time (a close waits for the provider's
    /// connection thread to let go of the endpoint).
    pub(crate) fn open(fabric: &Arc<Fabric>, gated: bool) -> Result<Arc<Eq>> {
        let wait_obj = if gated { sys::FI_WAIT_FD } else { sys::FI_WAIT_UNSPEC };
        let mut attr = sys::fi_eq_attr { size: 1024, wait_obj, ..Default::default() };
        let mut eq: *mut sys::fid_eq = null_mut();
        // SAFETY: attr and eq are valid for the call.
        let ret = unsafe { sys::rfi_eq_open(fabric.raw(), &mut attr, &mut eq, null_mut()) };
        check("fi_eq_open", ret)?;
        let mut eq = Eq {
            ptr: NonNull::new(eq).expect("fi_eq_open set the eq"),
            fabric: fabric.clone(),
            gate: Mutex::new(()),
            wait: None,
        };
        if gated {
            // SAFETY: the EQ was opened with FI_WAIT_FD.
            let fd = unsafe { fd_wait_of(eq.fid()) };
            eq.wait = Some(fd.ok_or_else(|| Error::Backend {
                call: "fi_control(FI_GETWAIT)".into(),
                msg: "the event queue has no wait fd".into(),
            })?);
        }
        Ok(Arc::new(eq))
    }

    /// What an endpoint bound to this queue holds while it closes: the
    /// gate, when the queue has one.
    pub(crate) fn close_gate(&self) -> Option<MutexGuard<'_, ()>> {
        self.wait.map(|_| self.gate.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The wait fd of a gated queue (see [`Eq::open`]).
    pub(crate) fn gated_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.wait.map(|fd| borrow_owned_by(fd, self))
    }

    /// One read without blocking, under the gate (see [`Eq::open`]).
    pub(crate) fn read_gated(&self) -> Result<EqEvent> {
        let _gate = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        self.sread(0)
    }
}

/// One event read from an EQ.
pub(crate) enum EqEvent {
    /// A connection request on a passive endpoint; owns the request's info.
    ConnReq { pep: usize, info: Info, data: Vec<u8> },
    /// An endpoint is connected; `data` is the peer's private data.
    Connected { ep: usize, data: Vec<u8> },
    /// An endpoint was shut down (by either side or by a failure).
    Shutdown { ep: usize },
    /// An error on an endpoint (refused, rejected with data, reset).
    Error { fid: usize, err: i32, data: Vec<u8> },
    /// Nothing within the timeout.
    None,
}

impl Eq {
    /// Blocks up to `timeout_ms` for one event.
    pub(crate) fn sread(&self, timeout_ms: i32) -> Result<EqEvent> {
        let mut buf = [0u64; 128];
        let mut ev: u32 = 0;
        let cap = std::mem::size_of_val(&buf);
        // SAFETY: buf is large and aligned enough for an fi_eq_cm_entry plus data.
        let n = unsafe {
            sys::rfi_eq_sread(self.raw(), &mut ev, buf.as_mut_ptr().cast(), cap, timeout_ms, 0)
        };
        if n == EAGAIN || n == -(sys::FI_ETIMEDOUT as isize) || n == -(sys::FI_EINTR as isize) {
            return Ok(EqEvent::None);
        }
        if n == EAVAIL {
            let mut e = sys::fi_eq_err_entry::default();
            // SAFETY: e is a valid out-parameter; err_data null/0 lets the provider lend its buffer.
            let r = unsafe { sys::rfi_eq_readerr(self.raw(), &mut e, 0) };
            if r < 0 {
                return if r == EAGAIN {
                    Ok(EqEvent::None)
                } else {
                    Err(fi_error("fi_eq_readerr", r))
                };
            }
            let data = if e.err_data.is_null() || e.err_data_size == 0 {
                Vec::new()
            } else {
                // SAFETY: err_data points to err_data_size bytes until the next EQ read.
                unsafe { std::slice::from_raw_parts(e.err_data.cast::<u8>(), e.err_data_size) }
                    .to_vec()
            };
            return Ok(EqEvent::Error { fid: e.fid as usize, err: e.err, data });
        }
        if n < 0 {
            return Err(fi_error("fi_eq_sread", n));
        }
        let hdr = std::mem::size_of::<sys::fi_eq_cm_entry>();
        // SAFETY: the provider wrote an fi_eq_cm_entry (n >= its size for CM events) into buf.
        let (fid, info) = unsafe {
            let e = &*(buf.as_ptr().cast::<sys::fi_eq_cm_entry>());
            (e.fid as usize, e.info)
        };
        let n = n as usize;
        let data = if n > hdr {
            // SAFETY: bytes hdr..n of buf were written by the provider.
            unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>().add(hdr), n - hdr) }
                .to_vec()
        } else {
            Vec::new()
        };
        Ok(match ev {
            sys::FI_CONNREQ => {
                // SAFETY: a CONNREQ's info is handed to us to free.
                match unsafe { Info::from_raw(info) } {
                    Some(info) => EqEvent::ConnReq { pep: fid, info, data },
                    None => EqEvent::None,
                }
            }
            sys::FI_CONNECTED => {
                // SAFETY: any info attached to other events is ours to free as well.
                drop(unsafe { Info::from_raw(info) });
                EqEvent::Connected { ep: fid, data }
            }
            sys::FI_SHUTDOWN => EqEvent::Shutdown { ep: fid },
            _ => EqEvent::None,
        })
    }
}

impl Cq {
    pub(crate) fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }

    /// Opens a CQ with the wait object `wait`.
    pub(crate) fn open(domain: &Arc<Domain>, size: usize, wait: CqWait) -> Result<Arc<Cq>> {
        let mut attr = sys::fi_cq_attr {
            size,
            format: sys::FI_CQ_FORMAT_DATA,
            wait_obj: match wait {
                CqWait::None => sys::FI_WAIT_NONE,
                CqWait::Fd => sys::FI_WAIT_FD,
                CqWait::PollSet => sys::FI_WAIT_POLLFD,
            },
            wait_cond: sys::FI_CQ_COND_NONE,
            ..Default::default()
        };
        let mut cq: *mut sys::fid_cq = null_mut();
        // SAFETY: attr and cq are valid for the call.
        let ret = unsafe { sys::rfi_cq_open(domain.raw(), &mut attr, &mut cq, null_mut()) };
        check("fi_cq_open", ret)?;
        Ok(Arc::new(Cq {
            ptr: NonNull::new(cq).expect("fi_cq_open set the cq"),
            domain: domain.clone(),
            wait,
        }))
    }

    /// The wait fd (FI_GETWAIT), when the CQ has one.
    pub(crate) fn wait_fd(&self) -> Option<i32> {
        if self.wait != CqWait::Fd {
            // FI_GETWAIT writes a wait-object-specific struct (a pollfd set
            // for FI_WAIT_POLLFD): only an FI_WAIT_FD CQ's is one int.
            return None;
        }
        // SAFETY: this CQ was opened with FI_WAIT_FD.
        unsafe { fd_wait_of(self.fid()) }
    }

    /// An `FI_WAIT_POLLFD` CQ's poll set (`FI_GETWAIT`) copied into `buf`
    /// (which grows to fit): its change index, or `None` for another wait
    /// object or when libfabric refuses. The caller keeps the CQ's progress
    /// passes out meanwhile (libfabric sizes and makes the copy under a
    /// lock that a pass adding to the set does not take).
    pub(crate) fn poll_set(&self, buf: &mut Vec<sys::pollfd>) -> Option<u64> {
        if self.wait != CqWait::PollSet {
            return None;
        }
        let mut room = buf.len().max(16);
        for _ in 0..4 {
            buf.clear();
            buf.resize(room, sys::pollfd { fd: -1, events: 0, revents: 0 });
            let mut p = sys::fi_wait_pollfd { change_index: 0, nfds: room, fd: buf.as_mut_ptr() };
            // SAFETY: on an FI_WAIT_POLLFD CQ FI_GETWAIT reads and writes a
            // fi_wait_pollfd and copies the set into `fd` only when `nfds`
            // (`room` initialised entries of `buf`) holds it all.
            let ret = unsafe {
                sys::rfi_control(self.fid(), sys::FI_GETWAIT as i32, (&raw mut p).cast())
            };
            if ret == 0 && p.nfds <= room {
                buf.truncate(p.nfds);
                return Some(p.change_index);
            }
            if ret != -(sys::FI_ETOOSMALL as i32) {
                return None;
            }
            room = p.nfds + 16;
        }
        None
    }
}

/// What a CQ's waiters sleep on (its `wait_obj`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CqWait {
    /// Nothing: read by polling only (`FI_WAIT_NONE`).
    None,
    /// One fd (`FI_WAIT_FD`; an epoll set on Linux).
    Fd,
    /// A set of fds (`FI_WAIT_POLLFD`; see [`crate::waitset`]).
    PollSet,
}

/// The wait fd of an EQ or CQ (`FI_GETWAIT`), when libfabric gives one.
///
/// # Safety
/// `fid` is a live EQ or CQ opened with `FI_WAIT_FD`, for which
/// `FI_GETWAIT` writes one int (for other wait objects it writes a
/// wait-object-specific struct).
unsafe fn fd_wait_of(fid: *mut sys::fid) -> Option<i32> {
    let mut fd: i32 = -1;
    // SAFETY: the caller's contract; `fd` is a valid int out-parameter.
    let ret =
        unsafe { sys::rfi_control(fid, sys::FI_GETWAIT as i32, (&raw mut fd).cast::<c_void>()) };
    (ret == 0 && fd >= 0).then_some(fd)
}

impl Pep {
    /// Opens and listens. Owns `info`: some providers keep pointers into it.
    pub(crate) fn open(fabric: &Arc<Fabric>, info: Info, eq: &Arc<Eq>) -> Result<Pep> {
        let mut p: *mut sys::fid_pep = null_mut();
        // SAFETY: fabric live, info from fi_getinfo.
        let ret = unsafe { sys::rfi_passive_ep(fabric.raw(), info.as_ptr(), &mut p, null_mut()) };
        check("fi_passive_ep", ret)?;
        let pep = Pep {
            ptr: NonNull::new(p).expect("fi_passive_ep set the pep"),
            fabric: fabric.clone(),
            eq: eq.clone(),
            info,
        };
        // SAFETY: both objects live.
        check("fi_pep_bind", unsafe { sys::rfi_pep_bind(pep.raw(), eq.fid(), 0) })?;
        // SAFETY: bound pep.
        check("fi_listen", unsafe { sys::rfi_listen(pep.raw()) })?;
        Ok(pep)
    }

    /// The bound address (fi_getname).
    pub(crate) fn name(&self) -> Option<SocketAddr> {
        getname(self.fid())
    }

    /// Rejects a connection request with private data.
    pub(crate) fn reject(&self, handle: *mut sys::fid, pd: &[u8]) -> Result<()> {
        // SAFETY: handle is the request's, pd valid for the call.
        let ret = unsafe { sys::rfi_reject(self.raw(), handle, pd.as_ptr().cast(), pd.len()) };
        check("fi_reject", ret)
    }
}

fn getname(fid: *mut sys::fid) -> Option<SocketAddr> {
    // SAFETY: the buffer has `len` bytes.
    sockaddr(|b, len| unsafe { sys::rfi_getname(fid, b, len) })
}

/// An address a libfabric call writes into a buffer of `len` bytes.
fn sockaddr(call: impl FnOnce(*mut std::ffi::c_void, &mut usize) -> i32) -> Option<SocketAddr> {
    let mut b = [0u8; 128];
    let mut len = b.len();
    if call(b.as_mut_ptr().cast(), &mut len) != 0 {
        return None;
    }
    parse_sockaddr(&b[..len.min(b.len())])
}

impl EpH {
    /// fi_endpoint + bind EQ and CQs + fi_enable. Owns `info`: some
    /// providers keep pointers into it.
    pub(crate) fn open(
        domain: &Arc<Domain>,
        info: Info,
        eq: &Arc<Eq>,
        binds: &[(Arc<Cq>, u64)],
    ) -> Result<EpH> {
        let mut e: *mut sys::fid_ep = null_mut();
        // SAFETY: domain live, info from fi_getinfo or a CONNREQ.
        let ret = unsafe { sys::rfi_endpoint(domain.raw(), info.as_ptr(), &mut e, null_mut()) };
        check("fi_endpoint", ret)?;
        let ep = EpH {
            ptr: NonNull::new(e).expect("fi_endpoint set the ep"),
            domain: domain.clone(),
            eq: eq.clone(),
            cqs: binds.iter().map(|(c, _)| c.clone()).collect(),
            info,
        };
        // SAFETY: all objects live and of the same fabric.
        check("fi_ep_bind(eq)", unsafe { sys::rfi_ep_bind(ep.raw(), eq.fid(), 0) })?;
        for (cq, flags) in binds {
            // SAFETY: as above.
            check("fi_ep_bind(cq)", unsafe { sys::rfi_ep_bind(ep.raw(), cq.fid(), *flags) })?;
        }
        // SAFETY: bound endpoint.
        check("fi_enable", unsafe { sys::rfi_enable(ep.raw()) })?;
        Ok(ep)
    }

    pub(crate) fn connect(&self, pd: &[u8]) -> Result<()> {
        // SAFETY: the destination address comes from the info the ep was opened with
        // (owned by self); pd valid.
        let ret = unsafe {
            sys::rfi_connect(
                self.raw(),
                (*self.info.as_ptr()).dest_addr,
                pd.as_ptr().cast(),
                pd.len(),
            )
        };
        check("fi_connect", ret)
    }

    pub(crate) fn accept(&self, pd: &[u8]) -> Result<()> {
        // SAFETY: pd valid for the call.
        let ret = unsafe { sys::rfi_accept(self.raw(), pd.as_ptr().cast(), pd.len()) };
        check("fi_accept", ret)
    }

    pub(crate) fn shutdown(&self) {
        // SAFETY: live ep.
        unsafe { sys::rfi_shutdown(self.raw(), 0) };
    }

    /// The local address (fi_getname).
    pub(crate) fn name(&self) -> Option<SocketAddr> {
        getname(self.fid())
    }

    /// The peer's address (fi_getpeer).
    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        // SAFETY: the buffer has `len` bytes.
        sockaddr(|b, len| unsafe { sys::rfi_getpeer(self.raw(), b, len) })
    }

    /// Whether 64-bit fetch-add and compare-swap are valid on this endpoint.
    pub(crate) fn atomics_valid(&self) -> bool {
        let mut n: usize = 0;
        // SAFETY: live ep, n is an out-parameter.
        let fa =
            unsafe { sys::rfi_fetch_atomicvalid(self.raw(), sys::FI_UINT64, sys::FI_SUM, &mut n) };
        let mut m: usize = 0;
        // SAFETY: as above.
        let cs = unsafe {
            sys::rfi_compare_atomicvalid(self.raw(), sys::FI_UINT64, sys::FI_CSWAP, &mut m)
        };
        fa == 0 && cs == 0 && n >= 1 && m >= 1
    }
}

impl Mr {
    /// fi_mr_reg of `len` bytes at `addr`.
    pub(crate) fn reg(
        domain: &Arc<Domain>,
        addr: *const u8,
        len: usize,
        access: u64,
        requested_key: u64,
    ) -> Result<Mr> {
        let mut mr: *mut sys::fid_mr = null_mut();
        // SAFETY: the caller keeps [addr, addr+len) allocated for the Mr's life (it holds
        // the MemRegion's Arc); mr receives a new object.
        let ret = unsafe {
            sys::rfi_mr_reg(
                domain.raw(),
                addr.cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut mr,
                null_mut(),
            )
        };
        check("fi_mr_reg", ret)?;
        Ok(Mr { ptr: NonNull::new(mr).expect("fi_mr_reg set the mr"), domain: domain.clone() })
    }

    pub(crate) fn key(&self) -> u64 {
        // SAFETY: live mr.
        unsafe { sys::rfi_mr_key(self.raw()) }
    }

    /// The local descriptor (for FI_MR_LOCAL providers), as an opaque address.
    pub(crate) fn desc(&self) -> usize {
        // SAFETY: live mr.
        unsafe { sys::rfi_mr_desc(self.raw()) as usize }
    }
}

/// A Linux eventfd: an observed EVD's wait fd, and a progress thread's kick.
pub(crate) struct EventFd(std::os::fd::OwnedFd);

impl EventFd {
    pub(crate) fn new() -> Result<EventFd> {
        // SAFETY: plain syscall; a valid fd is returned or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io("eventfd", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(EventFd(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    /// The descriptor, borrowed for `poll(2)` by a layer above.
    pub(crate) fn borrow(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.0)
    }

    /// Makes the fd readable.
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our fd.
        unsafe { libc::write(self.raw(), (&raw const one).cast(), 8) };
    }

    /// Makes the fd unreadable again.
    pub(crate) fn reset(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our non-blocking fd.
        unsafe { libc::read(self.raw(), (&raw mut v).cast(), 8) };
    }
}

/// Borrows a descriptor that libfabric owns inside `owner` (a CQ's or an
/// EQ's wait fd): it stays open as long as `owner` lives.
pub(crate) fn borrow_owned_by<T>(fd: i32, owner: &T) -> std::os::fd::BorrowedFd<'_> {
    let _ = owner;
    // SAFETY: the fd was returned by fi_control(FI_GETWAIT) on a CQ or EQ that `owner` keeps open;
    // libfabric closes it only when that object is closed, which cannot happen while `owner` is
    // borrowed.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}
