//! Protection domains (`ibv_alloc_pd`).

use super::device::Ctx;
use super::last_err;
use rdma_sys as ffi;
use rmr_api::Result;

/// An `ibv_pd`, deallocated on drop. Its owner keeps the device's IA alive.
pub(crate) struct Pd(*mut ffi::ibv_pd);

// SAFETY: PDs may be used from any thread.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `ctx`.
    ///
    /// # Errors
    /// `Error::Backend` from ibv_alloc_pd.
    pub(crate) fn alloc(ctx: Ctx) -> Result<Pd> {
        // SAFETY: a valid context (Ctx invariant).
        let p = unsafe { ffi::ibv_alloc_pd(ctx.raw()) };
        if p.is_null() { Err(last_err("ibv_alloc_pd")) } else { Ok(Pd(p)) }
    }

    /// The raw pointer, for the other FFI files.
    pub(crate) fn raw(&self) -> *mut ffi::ibv_pd {
        self.0
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: valid PD, dropped once after its MRs and QPs (they hold the owner).
        unsafe { ffi::ibv_dealloc_pd(self.0) };
    }
}
