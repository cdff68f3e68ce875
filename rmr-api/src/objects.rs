//! The object traits: [`Ia`], [`Pz`], [`Lmr`], [`Psp`], [`Ep`].
//!
//! They are object-safe and `Send + Sync`: applications hold them as
//! `Arc<dyn Trait>`, and a multirail endpoint holds rails of different
//! backends side by side. Children keep their parents alive (an LMR holds its
//! PZ, an EP its PZ and EVDs).

use crate::{
    Access, DtoFlags, EpAttr, EpId, EpState, Error, Evd, IaAttr, MemRegion, Result, RmrContext, Sge,
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

/// A protection zone: memory registered in it is usable only by endpoints of
/// the same zone, locally and remotely.
pub trait Pz: Send + Sync {
    /// Process-unique id of this zone.
    fn id(&self) -> u64;
    /// Registers `len` bytes of `region` starting at `offset` with `access`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a range outside the region.
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
    fn post_send(&self, local: &[Sge<'_>], cookie: u64, flags: DtoFlags) -> Result<()>;
    /// Posts a receive buffer (scatter list).
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    fn post_recv(&self, local: &[Sge<'_>], cookie: u64, flags: DtoFlags) -> Result<()>;
    /// RDMA-writes the gathered `local` segments to `remote` at `remote_offset`.
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()>;
    /// RDMA-reads `remote` at `remote_offset` into the scattered `local` segments.
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()>;
    /// RDMA write with 32-bit immediate data: consumes a receive at the target,
    /// whose completion ([`crate::DtoOp::RecvWriteImm`]) carries `imm`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`crate::Caps::WRITE_IMM`] is absent; else as [`Ep::post_send`].
    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: &RmrContext,
        remote_offset: u64,
        imm: u32,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (local, remote, remote_offset, imm, cookie, flags);
        Err(Error::Unsupported("rdma write with immediate"))
    }
    /// Atomically adds `add` to the 8-byte aligned word at `remote_offset`;
    /// the old value lands in `result` (8 bytes) and in the completion's `imm`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`crate::Caps::ATOMICS`] is absent; else as [`Ep::post_send`].
    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        add: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (result, remote, remote_offset, add, cookie, flags);
        Err(Error::Unsupported("fetch-and-add"))
    }
    /// Atomically replaces the word at `remote_offset` with `swap` if it
    /// equals `compare`; the old value lands in `result` and the completion's `imm`.
    ///
    /// # Errors
    /// As [`Ep::post_fetch_add`].
    #[allow(clippy::too_many_arguments)]
    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: &RmrContext,
        remote_offset: u64,
        compare: u64,
        swap: u64,
        cookie: u64,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (result, remote, remote_offset, compare, swap, cookie, flags);
        Err(Error::Unsupported("compare-and-swap"))
    }
    /// The peer's address once connected.
    fn peer_address(&self) -> Option<String>;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

/// Validates a local segment list for a DTO: every LMR registered, in the
/// EP's protection zone, holding `need` rights, in bounds, at most
/// `max_sges` entries. Returns the total length.
///
/// # Errors
/// [`Error::Protection`], [`Error::OutOfBounds`], [`Error::RemoteAccess`] is never
/// returned here; [`Error::InvalidArgument`] for too many segments or a
/// deregistered LMR.
pub fn check_local_sges(
    sges: &[Sge<'_>],
    pz_id: u64,
    need: Access,
    max_sges: usize,
) -> Result<u64> {
    if sges.len() > max_sges {
        return Err(Error::invalid(format!("{} segments, at most {max_sges}", sges.len())));
    }
    let mut total = 0u64;
    for s in sges {
        if !s.lmr.is_registered() {
            return Err(Error::invalid("local LMR is deregistered"));
        }
        if s.lmr.pz_id() != pz_id {
            return Err(Error::Protection(format!(
                "local LMR of PZ {} used on an EP of PZ {pz_id}",
                s.lmr.pz_id()
            )));
        }
        if !s.lmr.access().contains(need) {
            return Err(Error::Protection(format!(
                "local LMR lacks {need:?} (has {:?})",
                s.lmr.access()
            )));
        }
        match s.offset.checked_add(s.len) {
            Some(end) if end <= s.lmr.len() => {}
            _ => {
                return Err(Error::OutOfBounds {
                    offset: s.offset,
                    len: s.len,
                    limit: s.lmr.len(),
                });
            }
        }
        total += s.len;
    }
    Ok(total)
}

/// Maps a completion status to a `Result`, for [`crate::DtoCompletion::result`].
///
/// # Errors
/// The error variant matching `status`.
pub fn status_to_result(status: crate::Status, bytes: u64) -> Result<()> {
    use crate::Status as S;
    match status {
        S::Success => Ok(()),
        S::RemoteAccess => Err(Error::RemoteAccess("target refused the access".into())),
        S::Protection => Err(Error::Protection("target region is in another PZ".into())),
        S::BadKey => Err(Error::BadKey { key: 0 }),
        S::OutOfBounds => Err(Error::OutOfBounds { offset: 0, len: bytes, limit: 0 }),
        S::RecvTooSmall => Err(Error::RecvTooSmall { need: bytes, have: 0 }),
        S::ReceiverNotReady => Err(Error::Broken("no receive posted at the target".into())),
        S::Flushed => Err(Error::Flushed),
        S::Broken => Err(Error::Broken("connection broke under the DTO".into())),
        S::Unsupported => Err(Error::Unsupported("operation refused by the peer")),
    }
}
