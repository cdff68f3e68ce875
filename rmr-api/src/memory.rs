//! Registrable memory: a stable buffer (the library's, page aligned, or the
//! application's own) that peers may read and write at any time through RDMA.
//!
//! Because a peer may write into a region at any moment, a [`MemRegion`]
//! never hands out a plain `&mut [u8]`. Use the copying accessors
//! ([`MemRegion::read`], [`MemRegion::write`]), the atomic ones
//! ([`MemRegion::load_u64`], [`MemRegion::atomic_u64`]), or the `unsafe`
//! raw views when you can prove nobody else touches the bytes.
//!
//! The copying accessors are atomic word by word (see `words`; long runs of
//! whole words move at `memcpy`'s speed through a few lines of machine code
//! that move each byte once), so threads of one process that touch the same
//! bytes at once race without undefined behaviour: bytes under concurrent
//! writes have unspecified values, as with RDMA, and nothing worse. A
//! transport places what a peer writes into a region, and reads what a peer
//! reads from it, the same way ([`copy_in`], [`copy_out`]; through a
//! mapping, [`copy_to_mapped`], [`copy_from_mapped`]); it moves the
//! payload of a DTO posted on this side at memory speed instead ([`place`]):
//! the application leaves those bytes alone until the DTO completes, RDMA's
//! contract. Two regions never share bytes (which [`MemRegion::from_owner`]
//! asks of its caller): each region has its own word grid.

use crate::error::{Error, Result};
use crate::words::Span;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Alignment of every region the library allocates (a page).
pub const REGION_ALIGN: usize = 4096;

/// Who owns a region's bytes, and how to give them back.
enum Backing {
    /// `alloc_zeroed` with this layout.
    Alloc(Layout),
    /// An anonymous `mmap` of this many bytes (huge pages).
    Mapped(usize),
    /// A `Vec<u8>` taken apart: its capacity (`into_vec` rebuilds it).
    Vec(usize),
    /// A `Box<[T]>` taken apart: the function that rebuilds and drops it
    /// (from the pointer and the byte length).
    Boxed(unsafe fn(*mut u8, usize)),
    /// A shared mapping of this many bytes of a sealed memfd, which a
    /// process of the same node may map too ([`MemRegion::shared`]).
    Shared(usize, std::os::fd::OwnedFd),
    /// Memory kept alive by an owner the application handed over.
    Owner(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>),
}

/// A registrable memory buffer with a stable address.
///
/// Share it as `Arc<MemRegion>`: LMRs and in-flight DTOs hold the `Arc`, so
/// the memory outlives every transfer that targets it.
///
/// The bytes come from the library ([`MemRegion::new`], page aligned;
/// [`MemRegion::huge`], huge pages) or from the application
/// ([`MemRegion::from_vec`], [`MemRegion::from_boxed`],
/// [`MemRegion::from_owner`]). Either way the region owns them: an
/// application buffer moves into it, so it cannot be used, freed or moved
/// while a peer may write it, and comes back with [`MemRegion::into_vec`]
/// once no LMR or transfer holds the region any more:
///
/// ```
/// use rmr_api::MemRegion;
/// let samples: Vec<u8> = vec![7; 1 << 16];
/// let region = MemRegion::from_vec(samples); // `samples` is moved: no alias left
/// // ... register it, let peers write it, deregister ...
/// let samples = std::sync::Arc::into_inner(region).unwrap().into_vec().unwrap();
/// assert_eq!(samples.len(), 1 << 16);
/// ```
pub struct MemRegion {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: MemRegion owns its bytes exclusively (it keeps only a raw pointer to
// them, never a reference); its accessors and a transport's `copy_in` are
// atomic (its span's word grid, or `atomic_u64`; long runs through `asm!`
// that moves whole words as aligned machine moves, see `words`), so threads
// using them race only as atomics do; a transport's `place` of a posted DTO's payload races
// only a thread that breaks RDMA's contract; a peer's, the kernel's or a
// NIC's writes are outside this abstract machine (bytes under concurrent
// transfer have unspecified values).
unsafe impl Send for MemRegion {}
// SAFETY: as above; shared access never creates a Rust reference to the bytes.
unsafe impl Sync for MemRegion {}

/// Rebuilds and drops a `Box<[T]>` of `bytes` bytes that
/// [`MemRegion::from_boxed`] took apart.
///
/// # Safety
/// `ptr` comes from `Box::into_raw` of a `Box<[T]>` of `bytes` bytes, not
/// yet rebuilt.
unsafe fn drop_boxed<T>(ptr: *mut u8, bytes: usize) {
    // A zero-sized `T` has nothing to free whatever the count.
    let elems = bytes / std::mem::size_of::<T>().max(1);
    // SAFETY: the caller passes what `Box::into_raw` gave, once; the element
    // count follows from its byte length.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.cast::<T>(), elems)) });
}

impl MemRegion {
    /// Allocates `len` zeroed bytes, page-aligned.
    ///
    /// # Panics
    /// For a length that rounded up to whole pages exceeds `isize::MAX`
    /// (as `Vec` does for a capacity that large); an allocation failure
    /// aborts as in `Vec`.
    pub fn new(len: usize) -> std::sync::Arc<Self> {
        // Checked: unchecked, a length within a page of `usize::MAX` rounded
        // up to 0, and the region would claim `len` bytes of a 0-byte block.
        let size = len
            .max(1)
            .checked_next_multiple_of(REGION_ALIGN)
            .expect("MemRegion::new: length overflows whole pages");
        let layout = Layout::from_size_align(size, REGION_ALIGN).expect("region layout");
        // SAFETY: layout has non-zero size (at least one page, checked above).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        std::sync::Arc::new(MemRegion { ptr, len, backing: Backing::Alloc(layout) })
    }

    /// Allocates `len` zeroed bytes on huge pages (`mmap` with
    /// `MAP_HUGETLB`, the system's default huge page size), which a NIC
    /// translates with fewer entries than 4 KiB pages.
    ///
    /// # Errors
    /// [`Error::Io`] saying so when the system has no huge pages to give
    /// (none reserved: `/proc/sys/vm/nr_hugepages` is 0, or too few free).
    pub fn huge(len: usize) -> Result<std::sync::Arc<Self>> {
        let size = len
            .max(1)
            .checked_next_multiple_of(2 << 20)
            .ok_or_else(|| Error::invalid(format!("{len} bytes overflow whole huge pages")))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing; nothing else is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(Error::io(
                format!(
                    "mmap of {size} bytes on huge pages (are any reserved? \
                     /proc/sys/vm/nr_hugepages)"
                ),
                e,
            ));
        }
        let ptr = NonNull::new(raw.cast::<u8>()).expect("mmap never returns null on success");
        Ok(std::sync::Arc::new(MemRegion { ptr, len, backing: Backing::Mapped(size) }))
    }

    /// Allocates `len` zeroed bytes in shared memory (a sealed memfd,
    /// mapped shared), which processes of the same node may map as well.
    ///
    /// Every backend registers and moves it as any region. Unlike
    /// [`MemRegion::new`]'s memory it stays shared with a child made by
    /// `fork` (not copied on write), and it holds a file descriptor while
    /// it lives. The `shm` backend
    /// reads and writes such a region of a peer with a plain copy through a
    /// mapping of its own, at the speed of `memcpy`, where for other
    /// memory it needs a cross-memory system call per transfer: allocate
    /// the regions that processes of one node exchange data through this
    /// way.
    ///
    /// # Errors
    /// [`Error::Io`] when the memfd cannot be made or mapped (out of file
    /// descriptors or memory).
    pub fn shared(len: usize) -> Result<std::sync::Arc<Self>> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let size = len
            .max(1)
            .checked_next_multiple_of(REGION_ALIGN)
            .ok_or_else(|| Error::invalid(format!("{len} bytes overflow whole pages")))?;
        let fd =
            rustix::fs::memfd_create("rmr-region", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
                .map_err(|e| Error::io("memfd_create for a shared region", e.into()))?;
        rustix::fs::ftruncate(&fd, size as u64)
            .and_then(|()| {
                // Sealed at its size: a process that maps it can never make
                // this one's accesses fault by truncating it.
                rustix::fs::fcntl_add_seals(
                    &fd,
                    SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
                )
            })
            .map_err(|e| {
                Error::io(format!("size and seal a shared region of {size} bytes"), e.into())
            })?;
        // SAFETY: a fresh shared mapping at an address of the kernel's
        // choosing, of a file `size` bytes long that cannot shrink.
        let raw = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                size,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| Error::io(format!("mmap of a shared region of {size} bytes"), e.into()))?;
        let ptr = NonNull::new(raw.cast::<u8>()).expect("mmap never returns null on success");
        Ok(std::sync::Arc::new(MemRegion { ptr, len, backing: Backing::Shared(size, fd) }))
    }

    /// The memfd behind a region made by [`MemRegion::shared`] (the region
    /// starts at its first byte); `None` for every other region. Backends
    /// that let a peer process map the region use it.
    pub fn shared_file(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.backing {
            Backing::Shared(_, fd) => Some(std::os::fd::AsFd::as_fd(fd)),
            _ => None,
        }
    }

    /// Takes an application's vector as a region: the bytes stay where
    /// they are (no copy) and belong to the region until
    /// [`MemRegion::into_vec`] gives them back.
    pub fn from_vec(v: Vec<u8>) -> std::sync::Arc<Self> {
        let mut v = std::mem::ManuallyDrop::new(v);
        let (len, cap) = (v.len(), v.capacity());
        let ptr = NonNull::new(v.as_mut_ptr()).expect("a vector's pointer is never null");
        std::sync::Arc::new(MemRegion { ptr, len, backing: Backing::Vec(cap) })
    }

    /// Takes an application's boxed slice of plain-old-data values (`f64`,
    /// `u32`, `[u8; 4]`, ...) as a region of `size_of_val` bytes, in place.
    pub fn from_boxed<T: bytemuck::Pod + Send + Sync>(b: Box<[T]>) -> std::sync::Arc<Self> {
        let elems = b.len();
        let len = std::mem::size_of_val(&*b);
        let raw = Box::into_raw(b).cast::<u8>();
        let ptr = NonNull::new(raw).expect("a box's pointer is never null");
        debug_assert_eq!(elems * std::mem::size_of::<T>(), len);
        std::sync::Arc::new(MemRegion { ptr, len, backing: Backing::Boxed(drop_boxed::<T>) })
    }

    /// A region over memory the application maps or allocates itself (a
    /// file or device mapping, a huge-page mapping of its own), kept alive
    /// by `owner` (for example the mapping's handle), which the region
    /// drops after its last user.
    ///
    /// # Safety
    /// 1. `ptr` is valid for reads and writes of `len` bytes for as long as
    ///    `owner` lives, and does not move.
    /// 2. Nothing else reads or writes those bytes through a Rust
    ///    reference while the region lives (the owner included): from now
    ///    on they are RDMA memory, which a peer may write at any time.
    /// 3. `owner` does not free or unmap the memory before it is dropped.
    /// 4. No other live region covers any of those bytes (each region
    ///    accesses its bytes on a word grid of its own).
    pub unsafe fn from_owner(
        ptr: *mut u8,
        len: usize,
        owner: impl std::any::Any + Send + Sync,
    ) -> Result<std::sync::Arc<Self>> {
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::invalid("null region pointer"))?;
        Ok(std::sync::Arc::new(MemRegion { ptr, len, backing: Backing::Owner(Box::new(owner)) }))
    }

    /// A page-aligned region holding a copy of `data`.
    pub fn from_bytes(data: &[u8]) -> std::sync::Arc<Self> {
        let r = Self::new(data.len());
        r.write(0, data).expect("fits");
        r
    }

    /// Gives back the vector [`MemRegion::from_vec`] took, or the region
    /// itself when it was made otherwise. Reach it through
    /// `Arc::into_inner`/`Arc::try_unwrap`, which succeed only once no LMR
    /// or transfer holds the region.
    ///
    /// # Errors
    /// The region, unchanged, when it did not come from a vector.
    pub fn into_vec(self) -> std::result::Result<Vec<u8>, MemRegion> {
        match self.backing {
            Backing::Vec(cap) => {
                let me = std::mem::ManuallyDrop::new(self);
                // SAFETY: pointer, length and capacity are those `from_vec` took
                // from a live vector, which nothing has freed since; `me` is not
                // dropped, so the vector is rebuilt exactly once.
                Ok(unsafe { Vec::from_raw_parts(me.ptr.as_ptr(), me.len, cap) })
            }
            _ => Err(self),
        }
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

    /// The region's bytes on their word grid: how every copy into or out
    /// of them is made (see `words`).
    pub(crate) fn span(&self) -> Span {
        Span::new(self.ptr.as_ptr(), self.len)
    }

    /// Copies `dst.len()` bytes starting at `off` out of the region,
    /// atomically: each byte is read once, and a whole 8-byte aligned word
    /// stored in one piece (a flag: [`MemRegion::store_u64`], or the last
    /// word of a [`MemRegion::write`]) is seen whole.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        self.check(off, dst.len() as u64)?;
        // SAFETY: in bounds (checked); `dst` is a Rust buffer, so not the
        // region's bytes; every in-process access to those goes through
        // the region's span or `atomic_u64`.
        unsafe { self.span().load(off as usize, dst.as_mut_ptr(), dst.len()) };
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

    /// Copies `src` into the region at `off`, atomically and in address
    /// order: each byte is stored once, no earlier than the bytes before it
    /// (a long run stores a few words at a time), and a whole 8-byte
    /// aligned word at the end by itself, last, so a flag written last is
    /// seen only with what came before it.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        self.check(off, src.len() as u64)?;
        // SAFETY: in bounds (checked); `src` is a Rust buffer, so not the
        // region's bytes; the access rule as in `read`.
        unsafe { self.span().store(off as usize, src.as_ptr(), src.len()) };
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`].
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<()> {
        self.check(off, len)?;
        // SAFETY: in bounds (checked); the access rule as in `read`.
        unsafe { self.span().fill(off as usize, len as usize, byte) };
        Ok(())
    }

    /// The 8-byte aligned word at `off` as an atomic (the target of remote
    /// atomics and of RDMA-written flags that a process polls).
    ///
    /// Only for words every writer of which is atomic: this process through
    /// this accessor, the transport's target-side atomics, or a NIC/kernel
    /// placing a whole aligned word. A word that a peer's multi-byte RDMA
    /// write may also cover, or that the NIC's remote atomics update while
    /// this process updates it with CPU atomics, is not such a word: on
    /// verbs, CPU and HCA atomics are not atomic with respect to each other
    /// (`IBV_ATOMIC_HCA`), so update a remotely-atomic word only through DTO
    /// atomics, on every process (its home included, through a loopback EP).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`], or [`Error::InvalidArgument`] when `off` is not 8-byte aligned.
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        self.check(off, 8)?;
        if (self.addr() + off) % 8 != 0 {
            return Err(Error::invalid(format!("offset {off} is not 8-byte aligned")));
        }
        // SAFETY: in bounds, at an 8-byte aligned address (checked), lives as long as &self;
        // AtomicU64 has the same layout as u64; the word is a whole word of the region's
        // grid, which the accessors touch only as an AtomicU64 or, in long runs, by aligned
        // machine moves of whole words (`words`; a transport's `place` of a posted DTO's
        // payload aside, RDMA's contract).
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
        // SAFETY: both ranges are in bounds (checked above) of the regions
        // the two `&MemRegion`s keep alive; `Span::copy_from` goes through
        // a stack buffer in the overlap-safe direction; the access rule as
        // in `read`.
        unsafe {
            self.span().copy_from(dst_off as usize, &src.span(), src_off as usize, len as usize)
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
        // destination is `v`'s spare capacity (reserved above, distinct
        // from the region), whose `len` bytes are written before `set_len`.
        unsafe {
            self.span().load(off as usize, v.as_mut_ptr().add(v.len()), len);
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
        let p = self.ptr.as_ptr();
        match self.backing {
            // SAFETY: allocated in `new` with this layout.
            Backing::Alloc(layout) => unsafe { dealloc(p, layout) },
            // SAFETY: mapped in `huge` or `shared` with this size, unmapped
            // once here (a shared region's file closes after).
            Backing::Mapped(size) | Backing::Shared(size, _) => unsafe {
                libc::munmap(p.cast(), size);
            },
            // SAFETY: pointer, length and capacity of the vector `from_vec` took apart.
            Backing::Vec(cap) => unsafe { drop(Vec::from_raw_parts(p, self.len, cap)) },
            // SAFETY: the slice `from_boxed` took apart; elements from the byte length.
            Backing::Boxed(f) => unsafe { f(p, self.len) },
            Backing::Owner(_) => {}
        }
    }
}

impl std::fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemRegion({:#x}, {} bytes)", self.addr(), self.len)
    }
}

/// Copies `len` bytes from `src` to `dst` (not overlapping) as a NIC places
/// RDMA data: an 8-byte copy to an aligned `dst` word is one atomic store
/// (Release); other lengths are a plain copy (`memcpy`). A process that
/// polls such a word ([`MemRegion::load_u64`], or [`MemRegion::read`] of
/// the 8 bytes) then sees it whole, and everything the transport placed
/// before it: the RDMA-written flag of a barrier, on a software transport.
///
/// This is how a transport moves the payload of a DTO posted on this side in
/// and out of its local buffers: a plain `memcpy` (through the accessors'
/// atomic path the shm backend's 8-byte write+notify ran 12% slower, its
/// short copies being word by word). It leans on RDMA's contract: the
/// application leaves a posted DTO's local buffers alone until the DTO
/// completes, as a NIC may copy them at any moment meanwhile; a thread that
/// touches them anyway races this copy, as it would a NIC's. Bytes a peer
/// writes into this process's memory (the target of an RDMA write), which
/// the application may read at any time, go in with [`copy_in`] instead, and
/// the answer to a peer's RDMA read goes out with [`copy_out`].
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]; the bytes are a posted DTO's
/// local buffers, or memory no other thread of this process accesses while
/// the copy runs.
pub unsafe fn place(src: *const u8, dst: *mut u8, len: usize) {
    if len == 8 && dst.addr() % 8 == 0 {
        // SAFETY: `src` is readable for 8 bytes and `dst` writable, 8-byte
        // aligned (the caller's contract); when `dst` is a region's whole
        // word, the accessors touch it atomically too.
        unsafe {
            let w = src.cast::<u64>().read_unaligned();
            AtomicU64::from_ptr(dst.cast::<u64>()).store(w, Ordering::Release);
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Copies `n` bytes at `src`, memory outside every region of this process
/// (a ring's frame, say), into `region` at `off` as the region's own
/// accessors write: atomically, word by word (long runs at memory speed).
/// How a transport places what
/// a peer writes into this process's memory, which the application may
/// read (or poll) at any time.
///
/// # Errors
/// [`Error::OutOfBounds`] for a range outside the region (nothing copied).
///
/// # Safety
/// `src` is readable for `n` bytes and is no region's bytes of this
/// process.
#[inline]
pub unsafe fn copy_in(region: &MemRegion, off: u64, src: *const u8, n: usize) -> Result<()> {
    region.check(off, n as u64)?;
    // SAFETY: in bounds (checked); `src` as the caller promises.
    unsafe { region.span().store(off as usize, src, n) };
    Ok(())
}

/// Copies `n` bytes of `region` at `off` out to `dst`, memory outside
/// every region of this process (a ring's frame, say), as the region's own
/// accessors read: atomically, word by word (long runs at memory speed).
/// How a transport answers a
/// peer's RDMA read of this process's memory, which the application may
/// write at any time.
///
/// # Errors
/// [`Error::OutOfBounds`] for a range outside the region (nothing copied).
///
/// # Safety
/// `dst` is writable for `n` bytes and is no region's bytes of this
/// process.
#[inline]
pub unsafe fn copy_out(region: &MemRegion, off: u64, dst: *mut u8, n: usize) -> Result<()> {
    region.check(off, n as u64)?;
    // SAFETY: in bounds (checked); `dst` as the caller promises.
    unsafe { region.span().load(off as usize, dst, n) };
    Ok(())
}

/// Copies `n` bytes from `src` to `dst`, a range of a region this process
/// reaches through a mapping of its own (a peer's [`MemRegion::shared`]
/// file mapped here) much as [`copy_in`] copies into a region: atomically,
/// in address order, a whole aligned word at the end by itself, last. How a
/// transport writes into a peer's region that the peer's application may
/// read (or poll) at any time. The words are those of `dst`'s own range (a
/// mapping keeps the region's alignment, so they are the region's whole
/// words inside the range; a part of a word at the range's edges is
/// stored byte by byte, where `copy_in` would swap the region's word).
///
/// # Safety
/// `dst` is readable and writable and `src` readable for `n` bytes; they do
/// not overlap; `src` is no region's bytes of this process that another
/// thread may write meanwhile (a posted DTO's local buffers are fine: the
/// application leaves them alone until the DTO completes, as with
/// [`place`]).
pub unsafe fn copy_to_mapped(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the caller's contract; the span is `dst`'s range itself.
    unsafe { Span::new(dst, n).store(0, src, n) };
}

/// Copies `n` bytes of `src`, a range of a region this process reaches
/// through a mapping of its own, to `dst`, much as [`copy_out`] copies out
/// of a region: atomically, word by word. How a transport reads a peer's
/// region that the peer's application may write at any time.
///
/// # Safety
/// `src` is readable and writable (mapped so; it is read through atomics)
/// and `dst` writable for `n` bytes; they do not overlap; `dst` is no
/// region's bytes of this process that another thread may touch meanwhile
/// (a posted DTO's local buffers are fine, as with [`place`]).
pub unsafe fn copy_from_mapped(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract; the span is `src`'s range itself.
    unsafe { Span::new(src.cast_mut(), n).load(0, dst, n) };
}

#[cfg(test)]
mod tests;
