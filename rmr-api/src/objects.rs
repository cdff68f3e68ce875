//! The object traits: [`Ia`], [`Pz`], [`Lmr`], [`Psp`], [`Ep`].
//!
//! They are object-safe and `Send + Sync`: applications hold them as
//! `Arc<dyn Trait>`, and a multirail endpoint holds rails of different
//! backends side by side. Children keep their parents alive (an LMR holds its
//! PZ, an EP its PZ and EVDs).

use crate::{
    Access, CompareSwap, Cookie, DtoFlags, EpAttr, EpId, EpState, Error, Evd, IaAttr, MemRegion,
    RemoteAddr, Result, RmrContext, Sge,
};
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// The three EVDs an endpoint reports to (they may all be the same EVD).
#[derive(Clone)]
pub struct EpEvds {
    /// Completions of sends, RDMA writes/reads and atomics.
    pub request: Arc<dyn Evd>,
    /// Completions of receives.
    pub recv: Arc<dyn Evd>,
    /// Connection events: established, rejected, disconnected, broken.
    pub conn: Arc<dyn Evd>,
}

impl EpEvds {
    /// One EVD for everything.
    pub fn single(evd: &Arc<dyn Evd>) -> Self {
        EpEvds { request: evd.clone(), recv: evd.clone(), conn: evd.clone() }
    }
}

/// An interface adapter: one rail (one device/port, or one local address).
pub trait Ia: Send + Sync {
    /// Attributes and capabilities.
    fn attr(&self) -> &IaAttr;
    /// Creates a protection zone.
    ///
    /// # Errors
    /// Provider-specific resource errors.
    fn create_pz(&self) -> Result<Arc<dyn Pz>>;
    /// Creates an event dispatcher usable by this IA's endpoints and PSPs.
    ///
    /// # Errors
    /// Provider-specific resource errors.
    fn create_evd(&self) -> Result<Arc<dyn Evd>>;
    /// Creates an unconnected endpoint in `pz` reporting to `evds`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pz` or an EVD belongs to another provider.
    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn Ep>>;
    /// Listens on `service` (0 picks a free one; see [`Psp::service`]);
    /// connection requests arrive on `evd` as [`crate::Event::ConnectionRequest`].
    ///
    /// # Errors
    /// [`Error::Io`] when the service is taken or the address cannot be bound.
    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>>;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

impl dyn Ia {
    /// Listens on `service` (0 picks a free one) with an EVD of its own for
    /// the connection requests: the simple way to accept connections, see
    /// [`Listener::accept`].
    ///
    /// # Errors
    /// As [`Ia::create_evd`] and [`Ia::create_psp`].
    pub fn listen(&self, service: u16) -> Result<Listener> {
        let evd = self.create_evd()?;
        let psp = self.create_psp(service, &evd)?;
        Ok(Listener { psp, evd })
    }
}

/// A PSP with an EVD of its own, made by [`Ia::listen`](trait.Ia.html#method.listen):
/// connection requests wait there until [`Listener::accept`] takes them.
pub struct Listener {
    psp: Arc<dyn Psp>,
    evd: Arc<dyn Evd>,
}

impl Listener {
    /// Waits up to `timeout` for the next connection request, accepts it
    /// onto `ep` (an unconnected EP of the same IA) sending `reply` as the
    /// private data, and returns the connector's private data. The EP is
    /// connected when this returns (its [`crate::Event::Established`] also
    /// arrives on its connection EVD).
    ///
    /// # Errors
    /// [`Error::Timeout`] when no request came in time (`ep` stays
    /// unconnected and usable); the accept's own errors otherwise.
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ia: std::sync::Arc<dyn rmr_api::Ia>) -> rmr_api::Result<()> {
    /// use rmr_api::EpEvds;
    /// use std::time::Duration;
    /// let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    /// let listener = ia.listen(7471)?;
    /// let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    /// let hello = listener.accept(&ep, b"welcome", Duration::from_secs(30))?;
    /// # Ok(()) }
    /// ```
    pub fn accept(&self, ep: &Arc<dyn Ep>, reply: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let cr = self.next_request(timeout)?;
        let pd = cr.private_data().to_vec();
        cr.accept(ep, reply)?;
        Ok(pd)
    }

    /// Waits up to `timeout` for the next connection request and hands it
    /// over undecided (to look at its private data, then accept or reject).
    ///
    /// # Errors
    /// [`Error::Timeout`] when none came in time.
    pub fn next_request(&self, timeout: Duration) -> Result<crate::ConnRequest> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // Only connection requests reach this EVD; anything else (an
            // asynchronous error of the listener) is not for an EP.
            if let crate::Event::ConnectionRequest(cr) = self.evd.wait(Some(left), 1)? {
                return Ok(cr);
            }
        }
    }

    /// The service id listened on.
    pub fn service(&self) -> u16 {
        self.psp.service()
    }

    /// The local address, as a peer passes it to [`Ep::connect`].
    pub fn address(&self) -> String {
        self.psp.address()
    }

    /// The PSP itself.
    pub fn psp(&self) -> &Arc<dyn Psp> {
        &self.psp
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener({}:{})", self.address(), self.service())
    }
}

/// A protection zone: memory registered in it is usable only by endpoints of
/// the same zone, locally and remotely.
pub trait Pz: Send + Sync {
    /// Process-unique id of this zone.
    fn id(&self) -> u64;
    /// Registers `len` bytes of `region` starting at `offset` with `access`.
    /// The LMR holds the region (an `Arc`), so its memory stays put while
    /// the registration or any transfer on it lives.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a range outside the region.
    ///
    /// # Example
    /// ```no_run
    /// # fn f(pz: std::sync::Arc<dyn rmr_api::Pz>) -> rmr_api::Result<()> {
    /// use rmr_api::{Access, MemRegion};
    /// // The application's own samples, registered in place: peers may
    /// // write the second half.
    /// let samples = MemRegion::from_boxed(vec![0.0f64; 1 << 16].into_boxed_slice());
    /// let half = samples.len() as u64 / 2;
    /// let lmr = pz.register(&samples, half, half, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    /// let ctx = lmr.rmr_context(); // send this to the peer
    /// # Ok(()) }
    /// ```
    fn register(
        &self,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Arc<dyn Lmr>>;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

impl dyn Pz {
    /// Registers the whole region.
    ///
    /// # Errors
    /// As [`Pz::register`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(pz: std::sync::Arc<dyn rmr_api::Pz>) -> rmr_api::Result<()> {
    /// use rmr_api::{Access, MemRegion};
    /// let buf = MemRegion::new(1 << 20); // page aligned, zeroed
    /// let lmr = pz.register_all(&buf, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    /// assert_eq!(lmr.len(), 1 << 20);
    /// # Ok(()) }
    /// ```
    pub fn register_all(&self, region: &Arc<MemRegion>, access: Access) -> Result<Arc<dyn Lmr>> {
        self.register(region, 0, region.len() as u64, access)
    }
}

/// A local memory region: registered memory with access rights.
pub trait Lmr: Send + Sync {
    /// The memory.
    fn region(&self) -> &Arc<MemRegion>;
    /// First registered byte within the region.
    fn offset(&self) -> u64;
    /// Registered length.
    fn len(&self) -> u64;
    /// True for a zero-length registration.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Access rights.
    fn access(&self) -> Access;
    /// The protection zone's id.
    fn pz_id(&self) -> u64;
    /// What a peer needs to target this region (share it only with peers you trust
    /// with `access`).
    fn rmr_context(&self) -> RmrContext;
    /// False after [`Lmr::deregister`].
    fn is_registered(&self) -> bool;
    /// Revokes the registration: later local posts and remote accesses fail.
    ///
    /// # Errors
    /// Provider-specific (the region is still revoked for remote access).
    fn deregister(&self) -> Result<()>;
    /// Downcasting support (a multirail layer finds its per-rail LMRs this way).
    fn as_any(&self) -> &dyn Any;
}

/// A public service point: listens for connection requests on a service id.
pub trait Psp: Send + Sync {
    /// The service id actually listened on.
    fn service(&self) -> u16;
    /// The local address, as a peer passes it to [`Ep::connect`].
    fn address(&self) -> String;
    /// Stops listening; pending requests are rejected.
    fn close(&self);
}

/// A reliable connected endpoint.
///
/// Ordering (uDAPL's rules, kept by every backend): receives complete in the
/// order their sends were posted, and an RDMA write posted before a send is
/// visible at the target before the matching receive completes.
pub trait Ep: Send + Sync {
    /// Process-unique id, as carried by events.
    fn id(&self) -> EpId;
    /// Attributes.
    fn attr(&self) -> EpAttr;
    /// Connection state.
    fn state(&self) -> EpState;
    /// Connects to `service` at `remote` (an address in the provider's
    /// syntax), sending `private_data`; blocks until established, rejected
    /// or `timeout`. Returns the peer's private data. An
    /// [`crate::Event::Established`] is also posted on the connection EVD.
    ///
    /// # Errors
    /// [`Error::Rejected`], [`Error::Timeout`], [`Error::Io`] (refused, unreachable).
    fn connect(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>>;
    /// Closes the connection; both sides get [`crate::Event::Disconnected`],
    /// outstanding DTOs complete with [`crate::Status::Flushed`].
    ///
    /// # Errors
    /// [`Error::NotConnected`] when there is nothing to close.
    fn disconnect(&self) -> Result<()>;
    /// Posts a send of the gathered `local` segments.
    ///
    /// # Errors
    /// Local errors synchronously ([`Error::Protection`], [`Error::OutOfBounds`],
    /// [`Error::QueueFull`], [`Error::NotConnected`]); remote ones as error completions.
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_send(&[Sge::new(lmr, 0, 8)], Cookie(1), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()>;
    /// Posts a receive buffer (scatter list).
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_recv(&[Sge::whole(lmr)], Cookie(2), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()>;
    /// RDMA-writes the gathered `local` segments to `remote` (a peer's
    /// region and an offset, [`RmrContext::at`]).
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// // The whole LMR to byte 4096 of the peer's region, no completion event.
    /// ep.post_rdma_write(&[Sge::whole(lmr)], peer.at(4096), Cookie(3), DtoFlags::SUPPRESS)?;
    /// # Ok(()) }
    /// ```
    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()>;
    /// RDMA-reads `remote` into the scattered `local` segments.
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_rdma_read(&[Sge::new(lmr, 0, 64)], peer.at(0), Cookie(4), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()>;
    /// RDMA write with 32-bit immediate data: consumes a receive at the target,
    /// whose completion ([`crate::DtoOp::RecvWriteImm`]) carries `imm`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`crate::Caps::WRITE_IMM`] is absent; else as [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// // The data and, in the peer's receive completion, the number 42.
    /// ep.post_rdma_write_imm(&[Sge::whole(lmr)], peer.at(0), 42, Cookie(8), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        imm: u32,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (local, remote, imm, cookie, flags);
        Err(Error::Unsupported("rdma write with immediate"))
    }
    /// Atomically adds `add` to the 8-byte aligned word at `remote`;
    /// the old value lands in `result` (8 bytes) and in the completion's `imm`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`crate::Caps::ATOMICS`] is absent; else as [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, old: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_fetch_add(Sge::new(old, 0, 8), peer.at(0), 1, Cookie(5), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        add: u64,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (result, remote, add, cookie, flags);
        Err(Error::Unsupported("fetch-and-add"))
    }
    /// Atomically replaces the word at `remote` with `op.swap` if it
    /// equals `op.compare`; the old value lands in `result` and the completion's `imm`.
    ///
    /// # Errors
    /// As [`Ep::post_fetch_add`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, old: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{CompareSwap, Cookie, DtoFlags, Sge};
    /// let take_lock = CompareSwap { compare: 0, swap: 1 };
    /// ep.post_cmp_swap(Sge::new(old, 0, 8), peer.at(0), take_lock, Cookie(6), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        op: CompareSwap,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (result, remote, op, cookie, flags);
        Err(Error::Unsupported("compare-and-swap"))
    }
    /// Ends the connection once what was posted on it has been delivered:
    /// every DTO posted before (suppressed ones included) reaches the peer
    /// ahead of the disconnect, and this waits up to `timeout` until the
    /// peer has confirmed the end (for the transports that can tell). A peer
    /// that closed first is not an error. This is how a program ends that
    /// must not exit while its last messages are still on their way — no
    /// sleeps. The default is [`Ep::disconnect`], which such transports
    /// order behind what was posted.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the peer did not confirm in time (the
    /// endpoint is disconnected all the same); the disconnect's errors
    /// other than [`Error::NotConnected`].
    fn close(&self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        match self.disconnect() {
            Ok(()) | Err(Error::NotConnected) => Ok(()),
            Err(e) => Err(e),
        }
    }
    /// The peer's address once connected.
    fn peer_address(&self) -> Option<String>;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

impl dyn Ep {
    /// [`Ep::connect`], retried while the peer refuses (it has not started
    /// listening yet), until `timeout` has passed in all: how a client that
    /// may start before its server connects. A rejection is not retried.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the peer never accepted in time;
    /// [`Error::Rejected`] and the connect's other errors at once.
    pub fn connect_with_retry(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut nap = Duration::from_millis(1);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            match self.connect(remote, service, private_data, left) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::ConnectionRefused =>
                {
                    std::thread::sleep(nap.min(left));
                    nap = (nap * 2).min(Duration::from_millis(100));
                }
                r => return r,
            }
        }
    }
}
