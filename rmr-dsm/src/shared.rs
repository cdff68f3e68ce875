//! Typed shared memory: arrays of plain-old-data values in the shared
//! region, indexed by element, never by byte offset.

use super::runtime::Dsm;
use super::{DsmError, PAGE, Result};
use bytemuck::Pod;
use std::marker::PhantomData;
use std::ops::Range;

/// An array of `len` values of `T` in the shared region (from
/// [`Dsm::alloc`]). Reads see this process's own writes at once and other
/// processes' writes after an acquire (a barrier, or taking a lock they
/// released); writes reach others at this process's next release.
pub struct Shared<'a, T: Pod> {
    dsm: &'a Dsm,
    /// The first element's user address.
    addr: usize,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Pod> Clone for Shared<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Pod> Copy for Shared<'_, T> {}

impl<T: Pod> std::fmt::Debug for Shared<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("type", &std::any::type_name::<T>())
            .field("addr", &self.addr)
            .field("len", &self.len)
            .finish()
    }
}

impl<'a, T: Pod> Shared<'a, T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an array of no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's address in the shared region (for
    /// [`Dsm::read`] / [`Dsm::write`] on raw bytes).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The runtime this array lives in.
    pub fn dsm(&self) -> &'a Dsm {
        self.dsm
    }

    fn span(&self, start: usize, n: usize) -> Result<(usize, usize)> {
        let size = std::mem::size_of::<T>();
        match start.checked_add(n) {
            Some(end) if end <= self.len => Ok((self.addr + start * size, n * size)),
            _ => Err(DsmError::OutOfBounds { start, len: n, elements: self.len }),
        }
    }

    /// Element `i`.
    ///
    /// # Errors
    /// [`DsmError::OutOfBounds`], or a failed fetch.
    pub fn get(&self, i: usize) -> Result<T> {
        let mut v = [T::zeroed()];
        self.read(i, &mut v)?;
        Ok(v[0])
    }

    /// Sets element `i`.
    ///
    /// # Errors
    /// [`DsmError::OutOfBounds`], or a failed fetch.
    pub fn set(&self, i: usize, v: T) -> Result<()> {
        self.write(i, &[v])
    }

    /// Copies elements `start..start + out.len()` into `out` (the pages
    /// they span are fetched together, all reads in flight at once).
    ///
    /// # Errors
    /// [`DsmError::OutOfBounds`], or a failed fetch.
    pub fn read(&self, start: usize, out: &mut [T]) -> Result<()> {
        let (addr, bytes) = self.span(start, out.len())?;
        debug_assert_eq!(bytes, std::mem::size_of_val(out));
        self.dsm.read(addr, bytemuck::cast_slice_mut(out))
    }

    /// Writes `vals` at elements `start..start + vals.len()`.
    ///
    /// # Errors
    /// [`DsmError::OutOfBounds`], or a failed fetch.
    pub fn write(&self, start: usize, vals: &[T]) -> Result<()> {
        let (addr, _) = self.span(start, vals.len())?;
        self.dsm.write(addr, bytemuck::cast_slice(vals))
    }

    /// Starts fetching the pages of elements `range` that live at other
    /// processes, without waiting (see [`Dsm::prefetch`]).
    ///
    /// # Errors
    /// [`DsmError::OutOfBounds`], or a failed post.
    pub fn prefetch(&self, range: Range<usize>) -> Result<()> {
        let (addr, bytes) = self.span(range.start, range.end.saturating_sub(range.start))?;
        self.dsm.prefetch(addr, bytes)
    }

    /// Elements `range` as a vector.
    ///
    /// # Errors
    /// [`DsmError::OutOfBounds`], or a failed fetch.
    pub fn to_vec(&self, range: Range<usize>) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); range.end.saturating_sub(range.start)];
        self.read(range.start, &mut v)?;
        Ok(v)
    }
}

impl Dsm {
    /// Allocates a shared array of `len` values of `T`, zeroed, starting on
    /// a page boundary. A collective: every process makes the same
    /// allocations in the same order and gets the same array (no
    /// communication: the offsets follow from the order). The array's
    /// pages are dealt out in blocks over the processes, so the block of
    /// its indices [`Dsm::share`] gives a process (what
    /// [`Dsm::parallel_for`] runs there) mostly lives at that process.
    /// Allocate before touching those bytes through [`Dsm::write`].
    ///
    /// ```no_run
    /// # fn f(dsm: &rmr_dsm::Dsm) -> rmr_dsm::Result<()> {
    /// let grid = dsm.alloc::<f64>(1024 * 500)?;
    /// grid.set(0, 100.0)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`DsmError::OutOfSpace`] when the region (`DsmConfig::bytes`) has
    /// no room left.
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<Shared<'_, T>> {
        let size = std::mem::size_of::<T>();
        let bytes =
            len.checked_mul(size).ok_or(DsmError::OutOfSpace { wanted: usize::MAX, left: 0 })?;
        let mut next = self.alloc_next.lock().unwrap_or_else(|e| e.into_inner());
        let addr = next.next_multiple_of(PAGE);
        let left = self.len().saturating_sub(addr);
        if bytes > left {
            return Err(DsmError::OutOfSpace { wanted: bytes, left });
        }
        *next = addr + bytes;
        self.deal_homes(addr, bytes);
        Ok(Shared { dsm: self, addr, len, _t: PhantomData })
    }

    /// Bytes [`Dsm::alloc`] can still hand out (at most; page alignment
    /// takes some).
    pub fn available(&self) -> usize {
        let next = *self.alloc_next.lock().unwrap_or_else(|e| e.into_inner());
        self.len().saturating_sub(next)
    }
}
