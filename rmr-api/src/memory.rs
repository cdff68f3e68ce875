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
use std::io::{self, IoSlice, Read};
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

    /// Reads exactly `len` bytes from `r` straight into the region at `off`
    /// (how transports place incoming payloads without staging them).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] before any byte is read; the reader's error otherwise.
    pub fn read_exact_from(&self, off: u64, len: u64, r: &mut dyn Read) -> Result<io::Result<()>> {
        self.check(off, len)?;
        // SAFETY: bounds checked; the slice lives only for this call. Concurrent RDMA into the
        // same bytes is a user error with unspecified bytes as result, as on any RDMA NIC.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.as_ptr().add(off as usize), len as usize)
        };
        Ok(r.read_exact(dst))
    }

    /// Reads at most `len` bytes from `r` straight into the region at `off`
    /// with one `read` call: how a transport with non-blocking sockets
    /// places a payload as it arrives. Returns the bytes read.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] before any byte is read; the reader's error otherwise.
    pub fn read_some_from(
        &self,
        off: u64,
        len: u64,
        r: &mut dyn Read,
    ) -> Result<io::Result<usize>> {
        self.check(off, len)?;
        // SAFETY: bounds checked; the slice lives only for this call. Concurrent RDMA into the
        // same bytes is a user error with unspecified bytes as result, as on any RDMA NIC.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.as_ptr().add(off as usize), len as usize)
        };
        Ok(r.read(dst))
    }

    /// Calls `f` with a read-only view of `[off, off+len)`; the view does not
    /// escape the call. This is how transports hand payloads to `writev`
    /// without copying them.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn with_slice<R>(&self, off: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.check(off, len)?;
        // SAFETY: bounds checked; the slice does not outlive the call. Bytes a peer writes
        // concurrently are unspecified (RDMA semantics), never out of bounds.
        let s =
            unsafe { std::slice::from_raw_parts(self.as_ptr().add(off as usize), len as usize) };
        Ok(f(s))
    }

    /// Calls `f` with `IoSlice`s over `head` followed by the given region
    /// ranges, leaving out the first `skip` bytes of that concatenation: how a
    /// transport hands a header plus a gather list to one `writev`, resuming
    /// after a partial write, without copying. The views do not escape `f`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when a range lies outside its region.
    pub fn gather_io<'a, R>(
        head: &[u8],
        segs: impl IntoIterator<Item = (&'a MemRegion, u64, u64)>,
        mut skip: usize,
        f: impl FnOnce(&[IoSlice<'_>]) -> R,
    ) -> Result<R> {
        let mut iov: smallvec::SmallVec<[IoSlice<'_>; 8]> = smallvec::SmallVec::new();
        if skip < head.len() {
            iov.push(IoSlice::new(&head[skip..]));
            skip = 0;
        } else {
            skip -= head.len();
        }
        for (r, off, len) in segs {
            r.check(off, len)?;
            if skip as u64 >= len {
                skip -= len as usize;
                continue;
            }
            let (o, l) = (off + skip as u64, len - skip as u64);
            skip = 0;
            // SAFETY: bounds checked above; the view lives only until `f` returns, while the
            // caller holds the region's Arc. Concurrent RDMA into the bytes leaves their
            // value unspecified (RDMA semantics), never out of bounds.
            let s = unsafe { std::slice::from_raw_parts(r.as_ptr().add(o as usize), l as usize) };
            iov.push(IoSlice::new(s));
        }
        Ok(f(&iov))
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
    fn gather_skips_across_segments() {
        let a = MemRegion::from_bytes(b"abcdef");
        let b = MemRegion::from_bytes(b"XYZ");
        let flat = |skip| {
            MemRegion::gather_io(b"hd", [(&*a, 1, 3), (&*b, 0, 3)], skip, |iov| {
                iov.iter().flat_map(|s| s.iter().copied()).collect::<Vec<u8>>()
            })
            .unwrap()
        };
        assert_eq!(flat(0), b"hdbcdXYZ");
        assert_eq!(flat(1), b"dbcdXYZ");
        assert_eq!(flat(4), b"dXYZ");
        assert_eq!(flat(5), b"XYZ");
        assert_eq!(flat(8), b"");
        assert!(MemRegion::gather_io(b"", [(&*b, 2, 2)], 0, |_| ()).is_err());
    }
}
