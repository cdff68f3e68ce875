//! Checks and mappings every backend needs the same way.

use crate::error::{Error, Result};
use crate::lmr::Sge;
use crate::types::Access;

/// Where local segment `s`'s bytes lie: its region and the offset in it,
/// read from its LMR once and checked against the region itself. For a
/// backend that moves a segment's bytes through raw pointers (a ring copy,
/// cross-memory attach, a libfabric provider): [`Lmr`](crate::Lmr) is a
/// safe trait, so its `offset` and `len`, which [`check_local_sges`] checks
/// the segment against, are an implementation's account, not a bound. The
/// pointer may be formed from what this returns, for as long as `s`'s LMR
/// is borrowed.
///
/// # Errors
/// [`Error::OutOfBounds`] where the segment does not lie inside the region.
#[inline]
pub fn seg_place<'a>(s: &Sge<'a>) -> Result<(&'a std::sync::Arc<crate::MemRegion>, u64)> {
    let region = s.lmr.region();
    match s.lmr.offset().checked_add(s.offset) {
        Some(off) if off.checked_add(s.len).is_some_and(|end| end <= region.len() as u64) => {
            Ok((region, off))
        }
        _ => Err(outside_region(s, region.len() as u64)),
    }
}

/// [`seg_place`]'s error (out of line: the post path stays short).
#[cold]
#[inline(never)]
fn outside_region(s: &Sge<'_>, limit: u64) -> Error {
    Error::OutOfBounds { offset: s.lmr.offset().saturating_add(s.offset), len: s.len, limit }
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

/// Maps a completion to a `Result`, for [`crate::DtoCompletion::result`]:
/// success, or an [`Error::Dto`] carrying the completion's own operation,
/// endpoint, status and byte count (nothing invented).
///
/// # Errors
/// [`Error::Dto`] for every status but [`crate::Status::Success`].
pub fn completion_result(c: &crate::DtoCompletion) -> Result<()> {
    c.result()
}

/// A registered region as a target checks a remote access against it.
#[derive(Clone, Copy, Debug)]
pub struct RemoteTarget {
    /// Still registered.
    pub registered: bool,
    /// Its protection zone.
    pub pz_id: u64,
    /// The rights it was registered with.
    pub access: Access,
    /// Its first byte's address (what its RMR context names).
    pub base: u64,
    /// Its length.
    pub len: u64,
}

impl RemoteTarget {
    /// The target-side check of a remote access of `len` bytes at `addr`,
    /// needing `need`, from an EP of protection zone `pz_id`, in the order
    /// every backend makes it: registered, PZ, rights, bounds. Returns the
    /// offset of `addr` from the region's first byte.
    ///
    /// # Errors
    /// [`crate::Status::RemoteAccess`] (deregistered, or a right missing),
    /// [`crate::Status::Protection`], [`crate::Status::OutOfBounds`].
    pub fn check(
        &self,
        pz_id: u64,
        need: Access,
        addr: u64,
        len: u64,
    ) -> std::result::Result<u64, crate::Status> {
        use crate::Status;
        if !self.registered {
            return Err(Status::RemoteAccess);
        }
        if self.pz_id != pz_id {
            return Err(Status::Protection);
        }
        if !self.access.contains(need) {
            return Err(Status::RemoteAccess);
        }
        let off = addr.checked_sub(self.base).ok_or(Status::OutOfBounds)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(off),
            _ => Err(Status::OutOfBounds),
        }
    }
}
