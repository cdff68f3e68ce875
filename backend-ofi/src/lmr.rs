//! Local memory regions: `fi_mr_reg` with the provider's `mr_mode` honoured
//! (requested random keys unless FI_MR_PROV_KEY, virtual or offset
//! addressing as FI_MR_VIRT_ADDR says, descriptors for FI_MR_LOCAL).

use crate::ffi::{Mr, fi_error};
use crate::pz::PzShared;
use ofi_sys as sys;
use rmr_api::{Access, Error, Lmr, MemRegion, Result, RmrContext, Status};
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// libfabric access bits for rmr rights (local use is always allowed:
/// rmr checks local rights itself before posting).
pub(crate) fn fi_access(a: Access) -> u64 {
    let mut f = (sys::FI_SEND | sys::FI_RECV | sys::FI_READ | sys::FI_WRITE) as u64;
    if a.contains(Access::REMOTE_READ) || a.contains(Access::REMOTE_ATOMIC) {
        f |= sys::FI_REMOTE_READ as u64;
    }
    if a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC) {
        f |= sys::FI_REMOTE_WRITE as u64;
    }
    f
}

/// Registers `[addr, addr+len)` in `pz`'s domain with a fresh key.
/// Returns the registration and the key a peer must use.
pub(crate) fn reg_raw(
    pz: &PzShared,
    addr: *const u8,
    len: usize,
    access: u64,
) -> Result<(Mr, u64)> {
    let f = &pz.ia.feat;
    let mut last = None;
    for _ in 0..8 {
        let req = if f.prov_key {
            0
        } else {
            // Unguessable requested keys, cut to the provider's key size.
            let k = getrandom::u64()
                .map_err(|e| Error::io("getrandom", std::io::Error::other(e.to_string())))?;
            let k = if f.key_size >= 8 { k } else { k & ((1u64 << (8 * f.key_size)) - 1) };
            k.max(1)
        };
        match Mr::reg(&pz.domain, addr, len.max(1), access, req) {
            Ok(mr) => {
                let key = if f.prov_key { mr.key() } else { req };
                return Ok((mr, key));
            }
            // A key already taken in this domain: draw another.
            Err(e) => last = Some(e),
        }
        if f.prov_key {
            break;
        }
    }
    Err(last.unwrap_or_else(|| fi_error("fi_mr_reg", -1)))
}

pub(crate) struct LmrInner {
    pub(crate) region: Arc<MemRegion>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    pub(crate) pz_id: u64,
    pub(crate) key: u64,
    pub(crate) desc: usize,
    /// The zone whose key table lists it.
    pz: Weak<PzShared>,
    mr: Mutex<Option<Mr>>,
    registered: AtomicBool,
}

impl LmrInner {
    /// Places a write that rode in a message at `off` in the region, if
    /// the registration still stands: under the registration's lock, so a
    /// deregistration waits for a placement under way and none begins
    /// after it.
    pub(crate) fn place(&self, off: u64, data: &[u8]) -> std::result::Result<(), Status> {
        let mr = self.mr.lock().unwrap_or_else(|e| e.into_inner());
        if mr.is_none() || !self.registered.load(Ordering::Acquire) {
            return Err(Status::BadKey);
        }
        self.region.write(off, data).map_err(|_| Status::OutOfBounds)
    }

    pub(crate) fn register(
        pz: &Arc<PzShared>,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<LmrInner> {
        // The pointer arithmetic stays inside the region (checked by the
        // caller). `reg_raw` registers at least one byte: a zero-length
        // registration (which may sit at the region's very end) gets the
        // region's start (for an empty region, its dangling address, which
        // the tcp and sockets providers only record) with no remote rights,
        // so a peer reaches nothing through it, a zero-length access
        // included.
        let (addr, rights) = if len == 0 {
            (region.as_ptr(), fi_access(Access::empty()))
        } else {
            (region.as_ptr().wrapping_add(offset as usize), fi_access(access))
        };
        let (mr, key) = reg_raw(pz, addr, len as usize, rights)?;
        let desc = if pz.ia.feat.mr_local { mr.desc() } else { 0 };
        Ok(LmrInner {
            region: region.clone(),
            offset,
            len,
            access,
            pz_id: pz.id,
            key,
            desc,
            pz: Arc::downgrade(pz),
            mr: Mutex::new(Some(mr)),
            registered: AtomicBool::new(true),
        })
    }
}

/// A registered region of the libfabric backend. Dropping it deregisters.
pub struct OfiLmr {
    pub(crate) inner: Arc<LmrInner>,
}

impl Lmr for OfiLmr {
    fn region(&self) -> &Arc<MemRegion> {
        &self.inner.region
    }
    fn offset(&self) -> u64 {
        self.inner.offset
    }
    fn len(&self) -> u64 {
        self.inner.len
    }
    fn access(&self) -> Access {
        self.inner.access
    }
    fn pz_id(&self) -> u64 {
        self.inner.pz_id
    }
    fn rmr_context(&self) -> RmrContext {
        RmrContext::new(
            self.inner.key,
            self.inner.region.addr() + self.inner.offset,
            self.inner.len,
        )
    }
    fn is_registered(&self) -> bool {
        self.inner.registered.load(Ordering::Acquire)
    }
    fn deregister(&self) -> Result<()> {
        self.inner.registered.store(false, Ordering::Release);
        if let Some(pz) = self.inner.pz.upgrade() {
            pz.forget(self.inner.key, &self.inner);
        }
        // fi_close of the MR: the provider forgets the key at once.
        drop(self.inner.mr.lock().unwrap_or_else(|e| e.into_inner()).take());
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for OfiLmr {
    fn drop(&mut self) {
        let _ = self.deregister();
    }
}
