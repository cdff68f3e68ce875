//! Registrable memory: a stable, page-aligned buffer that peers may read and
//! write at any time through RDMA.
//!
//! Because a peer may write into a region at any moment, a [`MemRegion`]
//! never hands out a plain `&mut [u8]`. Use the copying accessors
//! ([`MemRegion::read`], [`MemRegion::write`]), the atomic ones
//! ([`MemRegion::load_u64`], [`MemRegion::atomic_u64`]), or the `unsafe`
//! raw views when you can prove nobody else touches the bytes.

use crate::{Error, Result};
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Alignment of every region (a page).
pub const REGION_ALIGN: usize = 4096;

/// A registrable memory buffer with a stable address.
///
/// Share it as `Arc<MemRegion>`: LMRs and in-flight DTOs hold the `Arc`, so
/// the memory outlives every transfer that targets it.
pub struct MemRegion {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: MemRegion owns its allocation exclusively; all access goes through
// raw-pointer copies or atomics whose races are the documented RDMA semantics
// (bytes under concurrent transfer have unspecified values), never through
// Rust references that outlive a call.
unsafe impl Send for MemRegion {}
// SAFETY: as above; shared access never creates aliasing `&mut`.
unsafe impl Sync for MemRegion {}

impl MemRegion {
    /// Allocates `len` zeroed bytes, page-aligned.
    ///
    /// # Panics
    /// Never for a sane length; an allocation failure aborts as in `Vec`.
    pub fn new(len: usize) -> std::sync::Arc<Self> {
        let size = len.max(1).next_multiple_of(REGION_ALIGN);
        let layout = Layout::from_size_align(size, REGION_ALIGN).expect("region layout");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        std::sync::Arc::new(MemRegion { ptr, len, layout })
    }

    /// A region holding a copy of `data`.
    pub fn from_bytes(data: &[u8]) -> std::sync::Arc<Self> {
        let r = Self::new(data.len());
        r.write(0, data).expect("fits");
        r
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first byte (what verbs and libfabric register).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The first byte's address as an integer (an RMR context's `addr` base).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Checks that `[off, off+len)` lies inside the region.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn check(&self, off: u64, len: u64) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(()),
            _ => Err(Error::OutOfBounds { offset: off, len, limit: self.len as u64 }),
        }
    }

    /// Copies `dst.len()` bytes starting at `off` out of the region.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len() as u64)?;
        // SAFETY: bounds checked above; dst is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(off as usize),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
        Ok(())
    }

    /// Copies `len` bytes at `off` into a new vector.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn to_vec(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v)?;
        Ok(v)
    }

    /// Copies `src` into the region at `off`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        self.check(off, src.len() as u64)?;
        // SAFETY: bounds checked above; src is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(off as usize), src.len())
        };
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<()> {
        self.check(off, len)?;
        // SAFETY: bounds checked above.
        unsafe { std::ptr::write_bytes(self.as_ptr().add(off as usize), byte, len as usize) };
        Ok(())
    }

    /// The 8-byte aligned word at `off` as an atomic (the target of remote
    /// atomics and of RDMA-written flags that a process polls).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`], or [`Error::InvalidArgument`] when `off` is not 8-byte aligned.
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        self.check(off, 8)?;
        if off % 8 != 0 {
            return Err(Error::invalid(format!("offset {off} is not 8-byte aligned")));
        }
        // SAFETY: in bounds, 8-byte aligned (region is page aligned), lives as long as &self;
        // AtomicU64 has the same layout as u64 and every access to the word is atomic or a
        // byte copy with RDMA semantics.
        Ok(unsafe { AtomicU64::from_ptr(self.as_ptr().add(off as usize).cast::<u64>()) })
    }

    /// Atomically loads the little-endian u64 at `off` (Acquire).
    ///
    /// # Errors
    /// As [`MemRegion::atomic_u64`].
    pub fn load_u64(&self, off: u64) -> Result<u64> {
        Ok(u64::from_le(self.atomic_u64(off)?.load(Ordering::Acquire)))
    }

    /// Atomically stores a little-endian u64 at `off` (Release).
    ///
    /// # Errors
    /// As [`MemRegion::atomic_u64`].
    pub fn store_u64(&self, off: u64, v: u64) -> Result<()> {
        self.atomic_u64(off)?.store(v.to_le(), Ordering::Release);
        Ok(())
    }

    /// Copies `len` bytes at `src_off` of `src` to `dst_off` of this
    /// region (the two may be the same region, ranges may overlap): how a
    /// forwarder moves a payload between registered buffers without a
    /// staging copy.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when either range lies outside its region
    /// (nothing is copied).
    pub fn copy_from(&self, dst_off: u64, src: &MemRegion, src_off: u64, len: u64) -> Result<()> {
        self.check(dst_off, len)?;
        src.check(src_off, len)?;
        // SAFETY: both ranges are in bounds (checked above) of allocations the
        // two `&MemRegion`s keep alive; `ptr::copy` allows overlap; no Rust
        // reference to region bytes is created.
        unsafe {
            std::ptr::copy(
                src.as_ptr().add(src_off as usize),
                self.as_ptr().add(dst_off as usize),
                len as usize,
            )
        };
        Ok(())
    }

    /// Appends a copy of `len` bytes at `off` to `v` (how a transport
    /// batches small payloads into one buffer).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] (nothing is appended).
    pub fn append_to(&self, off: u64, len: u64, v: &mut Vec<u8>) -> Result<()> {
        self.check(off, len)?;
        let len = len as usize;
        v.reserve(len);
        // SAFETY: the source range is in bounds (checked above); the
        // destination is `v`'s spare capacity, reserved above and distinct
        // from the region; `len` bytes are initialised before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().add(off as usize),
                v.as_mut_ptr().add(v.len()),
                len,
            );
            v.set_len(v.len() + len);
        }
        Ok(())
    }

    /// A read-only view of the whole region.
    ///
    /// # Safety
    /// No peer or local thread may write the region while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// A mutable view of the whole region.
    ///
    /// # Safety
    /// No peer or local thread may read or write the region while the slice
    /// lives (no outstanding DTO or remote right may target it).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len) }
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl std::fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemRegion({:#x}, {} bytes)", self.addr(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_accessors_respect_bounds() {
        let r = MemRegion::new(100);
        assert_eq!(r.as_ptr() as usize % REGION_ALIGN, 0);
        r.write(90, &[7; 10]).unwrap();
        assert!(matches!(r.write(91, &[7; 10]), Err(Error::OutOfBounds { .. })));
        assert!(matches!(r.read(u64::MAX, &mut [0; 2]), Err(Error::OutOfBounds { .. })));
        assert_eq!(r.to_vec(88, 4).unwrap(), vec![0, 0, 7, 7]);
        r.store_u64(8, 0xdead).unwrap();
        assert_eq!(r.load_u64(8).unwrap(), 0xdead);
        assert!(r.atomic_u64(4).is_err());
    }

    #[test]
    fn copies_between_regions_and_into_vectors() {
        let a = MemRegion::from_bytes(b"abcdef");
        let b = MemRegion::new(6);
        b.copy_from(1, &a, 2, 3).unwrap();
        assert_eq!(b.to_vec(0, 6).unwrap(), b"\0cde\0\0");
        a.copy_from(1, &a, 0, 5).unwrap(); // overlapping, same region
        assert_eq!(a.to_vec(0, 6).unwrap(), b"aabcde");
        assert!(b.copy_from(4, &a, 0, 3).is_err());
        assert!(b.copy_from(0, &a, 4, 3).is_err());
        let mut v = b"x".to_vec();
        a.append_to(4, 2, &mut v).unwrap();
        assert_eq!(v, b"xde");
        assert!(a.append_to(5, 2, &mut v).is_err());
        assert_eq!(v, b"xde");
    }
}
