//! Memory regions (`ibv_reg_mr`).

use super::last_err;
use super::pd::Pd;
use rdma_sys as ffi;
use rmr_api::{MemRegion, Result};
use std::sync::Arc;

/// An `ibv_mr` over part of a [`MemRegion`]; deregistered on drop.
pub(crate) struct Mr {
    raw: *mut ffi::ibv_mr,
    _region: Arc<MemRegion>,
}

// SAFETY: MRs may be used and deregistered from any thread.
unsafe impl Send for Mr {}
// SAFETY: only the immutable lkey/rkey are read through &self.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `len` bytes of `region` at `offset` with `access` bits.
    ///
    /// # Errors
    /// `Error::Backend` from ibv_reg_mr (pinning limits, rights the device lacks).
    pub(crate) fn register(
        pd: &Pd,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: u32,
    ) -> Result<Mr> {
        region.check(offset, len)?;
        // A zero-length registration is refused by some drivers: register
        // the region's first byte instead (always allocated).
        let (offset, n) = if len == 0 { (0, 1) } else { (offset, len as usize) };
        // SAFETY: bounds checked above; the region is kept alive by this Mr
        // and its memory stays at a fixed address, so the HCA's mapping of
        // [as_ptr+offset, +n) stays valid until ibv_dereg_mr.
        let raw = unsafe {
            ffi::ibv_reg_mr(pd.raw(), region.as_ptr().add(offset as usize).cast(), n, access as i32)
        };
        if raw.is_null() {
            return Err(last_err("ibv_reg_mr"));
        }
        Ok(Mr { raw, _region: region.clone() })
    }

    /// Local key.
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: valid MR until drop.
        unsafe { (*self.raw).lkey }
    }

    /// Remote key.
    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: valid MR until drop.
        unsafe { (*self.raw).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: valid MR, deregistered once; the region outlives this call.
        unsafe { ffi::ibv_dereg_mr(self.raw) };
    }
}
