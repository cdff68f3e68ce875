//! Memory registration: a [`Pz`] (protection zone) registers memory as an
//! [`Lmr`]; an [`Sge`] names a range of one for a DTO.

use crate::error::Result;
use crate::memory::MemRegion;
use crate::remote::RmrContext;
use crate::types::Access;
use std::any::Any;
use std::fmt;
use std::sync::Arc;

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
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) for a range outside the region.
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

/// One element of a gather/scatter list: a range of a local LMR
/// (uDAPL's LMR triplet). `offset` is relative to the start of the LMR.
#[derive(Clone, Copy)]
pub struct Sge<'a> {
    /// The registered region.
    pub lmr: &'a dyn Lmr,
    /// First byte, relative to the LMR's start.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

impl<'a> Sge<'a> {
    /// A segment covering `len` bytes at `offset` of `lmr`.
    pub fn new(lmr: &'a dyn Lmr, offset: u64, len: u64) -> Self {
        Sge { lmr, offset, len }
    }

    /// A segment covering the whole LMR.
    pub fn whole(lmr: &'a dyn Lmr) -> Self {
        Sge { lmr, offset: 0, len: lmr.len() }
    }
}

impl fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sge(offset={}, len={})", self.offset, self.len)
    }
}

/// Total byte count of a segment list.
pub fn sge_total(sges: &[Sge<'_>]) -> u64 {
    sges.iter().map(|s| s.len).sum()
}
