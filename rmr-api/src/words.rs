//! How `MemRegion`'s copying accessors touch a region's bytes: atomically,
//! word by word.
//!
//! Several threads of a process may use those accessors on the same bytes
//! at once (the application's, or a transport's small copies through
//! them). A plain copy racing another access is a data race, which Rust's
//! memory model makes undefined behaviour, whatever the values. So each
//! accessor goes through [`Span`]: each 8-byte aligned word that lies
//! wholly inside the region is read and written as an `AtomicU64` (a part
//! of one with a compare-and-swap that keeps the other bytes), and each
//! byte outside such words (a region that does not start or end on a word
//! boundary) only as an `AtomicU8`. Which words are whole is a property of
//! the region, never of one access, so an edge byte and a whole word never
//! share an access. Stores are Release and loads Acquire, which on x86-64
//! are plain moves: a word written last (a flag) publishes what was
//! written before it, as a NIC placing RDMA data in order does.
//!
//! A run of 16 or more whole words (128 bytes) moves on x86-64 through a
//! few lines of machine code instead (`vector`), about as fast as `memcpy`
//! (word by word in Rust, a 4000-byte row copied at about 0.6x of its
//! speed): aligned 16- or 32-byte moves of whole words on the region's
//! side, after a Release fence (a store) or before an Acquire fence (a
//! load). The order is the same, address order with the last word moved
//! by itself; the words of one vector move may become visible together.
//! Under Miri, with `--cfg rmr_plain_words` (ThreadSanitizer runs, which
//! do not see inside `asm!`) and on other targets every run goes word by
//! word. (A transport moves a posted DTO's payload with `place` instead:
//! see its documentation.)

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Bytes moved per step of a region-to-region copy.
const CHUNK: usize = 512;

/// A region's bytes as its word grid sees them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    base: *mut u8,
    len: usize,
    /// First address of the whole words (`base` rounded up to 8).
    lo: usize,
    /// End of the whole words (`base + len` rounded down to 8; at least `lo`).
    hi: usize,
}

impl Span {
    /// The span of `len` bytes at `base`.
    #[inline]
    pub(crate) fn new(base: *mut u8, len: usize) -> Span {
        let start = base.addr();
        let lo = start.next_multiple_of(8);
        let hi = ((start + len) & !7).max(lo);
        Span { base, len, lo, hi }
    }

    /// The whole-word aligned address of the word holding `a`, when that
    /// word lies inside the region.
    fn word_of(&self, a: usize) -> Option<usize> {
        let w = a & !7;
        (w >= self.lo && w + 8 <= self.hi).then_some(w)
    }

    #[inline]
    fn at(&self, a: usize) -> *mut u8 {
        self.base.with_addr(a)
    }

    /// Copies `n` bytes from `src` into the region at `off`.
    ///
    /// # Safety
    /// `[off, off + n)` lies inside the span; `src` is readable for `n`
    /// bytes and not inside this region; every other in-process access to
    /// the region's bytes goes through a `Span` of the same region (or is
    /// an `AtomicU64` on a whole word, as `MemRegion::atomic_u64` hands out).
    #[inline]
    pub(crate) unsafe fn store(&self, off: usize, src: *const u8, n: usize) {
        debug_assert!(off.checked_add(n).is_some_and(|e| e <= self.len));
        let a = self.base.addr() + off;
        if n % 8 == 0 && a % 8 == 0 && a >= self.lo && a + n <= self.hi {
            // Whole words only (a flag, a row of doubles): the common case.
            // SAFETY: `src` is readable for `n` bytes; whole aligned words
            // of the region (checked against the grid).
            unsafe {
                if n == 8 {
                    let v = src.cast::<u64>().read_unaligned();
                    AtomicU64::from_ptr(self.at(a).cast()).store(v, Ordering::Release);
                } else {
                    store_words(self.at(a), src, n / 8);
                }
            }
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { self.store_any(off, src, n) }
    }

    /// [`Span::store`] for any range.
    ///
    /// # Safety
    /// As [`Span::store`].
    #[inline(never)]
    unsafe fn store_any(&self, off: usize, src: *const u8, n: usize) {
        let mut a = self.base.addr() + off;
        let end = a + n;
        let mut s = src;
        while a < end {
            match self.word_of(a) {
                Some(w) if a == w && end - a >= 8 => {
                    // The fast run: whole words up to the end or the grid's edge.
                    let words = ((end.min(self.hi) & !7) - a) / 8;
                    // SAFETY: `words` whole aligned words of the region from
                    // `a` (the grid); `s` is readable for their bytes.
                    unsafe { store_words(self.at(a), s, words) };
                    a += words * 8;
                    s = s.wrapping_add(words * 8);
                }
                Some(w) => {
                    // Part of a whole word: change those bytes only.
                    let k = (w + 8).min(end) - a;
                    let mut part = [0u8; 8];
                    // SAFETY: `s` is readable for k bytes (a + k <= end).
                    unsafe { std::ptr::copy_nonoverlapping(s, part.as_mut_ptr(), k) };
                    let at = a - w;
                    // SAFETY: a whole aligned word of the region.
                    let word = unsafe { AtomicU64::from_ptr(self.at(w).cast()) };
                    let _ = word.fetch_update(Ordering::Release, Ordering::Relaxed, |old| {
                        let mut b = old.to_ne_bytes();
                        b[at..at + k].copy_from_slice(&part[..k]);
                        Some(u64::from_ne_bytes(b))
                    });
                    a += k;
                    s = s.wrapping_add(k);
                }
                None => {
                    // SAFETY: a byte of the region outside the whole words;
                    // `s` is readable for one more byte.
                    unsafe { AtomicU8::from_ptr(self.at(a)).store(*s, Ordering::Release) };
                    a += 1;
                    s = s.wrapping_add(1);
                }
            }
        }
    }

    /// Copies `n` bytes of the region at `off` to `dst`.
    ///
    /// # Safety
    /// As [`Span::store`], with `dst` writable for `n` bytes.
    #[inline]
    pub(crate) unsafe fn load(&self, off: usize, dst: *mut u8, n: usize) {
        debug_assert!(off.checked_add(n).is_some_and(|e| e <= self.len));
        let a = self.base.addr() + off;
        if n % 8 == 0 && a % 8 == 0 && a >= self.lo && a + n <= self.hi {
            // SAFETY: whole aligned words of the region (checked against
            // the grid); `dst` is writable for `n` bytes.
            unsafe {
                if n == 8 {
                    let v = AtomicU64::from_ptr(self.at(a).cast()).load(Ordering::Acquire);
                    dst.cast::<u64>().write_unaligned(v);
                } else {
                    load_words(self.at(a), dst, n / 8);
                }
            }
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { self.load_any(off, dst, n) }
    }

    /// [`Span::load`] for any range.
    ///
    /// # Safety
    /// As [`Span::load`].
    #[inline(never)]
    unsafe fn load_any(&self, off: usize, dst: *mut u8, n: usize) {
        let mut a = self.base.addr() + off;
        let end = a + n;
        let mut d = dst;
        while a < end {
            match self.word_of(a) {
                Some(w) if a == w && end - a >= 8 => {
                    let words = ((end.min(self.hi) & !7) - a) / 8;
                    // SAFETY: `words` whole aligned words of the region from
                    // `a` (the grid); `d` is writable for their bytes.
                    unsafe { load_words(self.at(a), d, words) };
                    a += words * 8;
                    d = d.wrapping_add(words * 8);
                }
                Some(w) => {
                    let k = (w + 8).min(end) - a;
                    // SAFETY: a whole aligned word of the region.
                    let v = unsafe { AtomicU64::from_ptr(self.at(w).cast()) }
                        .load(Ordering::Acquire)
                        .to_ne_bytes();
                    let at = a - w;
                    // SAFETY: `d` is writable for k more bytes.
                    unsafe { std::ptr::copy_nonoverlapping(v[at..].as_ptr(), d, k) };
                    a += k;
                    d = d.wrapping_add(k);
                }
                None => {
                    // SAFETY: a byte of the region outside the whole words;
                    // `d` is writable for one more byte.
                    unsafe { *d = AtomicU8::from_ptr(self.at(a)).load(Ordering::Acquire) };
                    a += 1;
                    d = d.wrapping_add(1);
                }
            }
        }
    }

    /// Sets `n` bytes at `off` to `byte`.
    ///
    /// # Safety
    /// As [`Span::store`] for the range.
    pub(crate) unsafe fn fill(&self, off: usize, n: usize, byte: u8) {
        let chunk = [byte; CHUNK];
        let mut done = 0;
        while done < n {
            let k = (n - done).min(CHUNK);
            // SAFETY: the caller's range; `chunk` is a distinct buffer.
            unsafe { self.store(off + done, chunk.as_ptr(), k) };
            done += k;
        }
    }

    /// Copies `n` bytes at `src_off` of `src` to `dst_off` of this span,
    /// through a buffer on the stack; the two may be one region, and the
    /// ranges may overlap (copied back to front when the destination lies
    /// after the source).
    ///
    /// # Safety
    /// Both ranges lie inside their spans; the access rule of
    /// [`Span::store`] holds for both regions.
    pub(crate) unsafe fn copy_from(&self, dst_off: usize, src: &Span, src_off: usize, n: usize) {
        let mut buf = [0u8; CHUNK];
        let backwards = src.base.addr() + src_off < self.base.addr() + dst_off;
        let mut left = n;
        while left > 0 {
            let k = left.min(CHUNK);
            let at = if backwards { left - k } else { n - left };
            // SAFETY: in bounds (the caller's ranges); `buf` is distinct.
            unsafe {
                src.load(src_off + at, buf.as_mut_ptr(), k);
                self.store(dst_off + at, buf.as_ptr(), k);
            }
            left -= k;
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri), not(rmr_plain_words)))]
mod vector {
    //! The long runs in machine code. Each copy moves four vector registers
    //! per step (16-byte SSE2 moves, which every x86-64 has, or 32-byte AVX2
    //! ones where the processor has them) while more than that is left,
    //! then 8 bytes per step, so the last 8 bytes always go by an 8-byte
    //! move of their own (the step's bound, 72 or 136 bytes, keeps a word
    //! back for that: do not lower it to the step). The region's side is
    //! aligned to the vector size (the callers move words one by one up to
    //! it), so its vector moves never split across cache lines.
    //!
    //! Rust's memory model has no atomic memcpy yet (RFC 3301, per-byte
    //! atomics, is the proposal); to the rest of the program an `asm!`
    //! block is what the machine does. What this relies on: each aligned
    //! 8-byte piece of an aligned vector move is read or written whole,
    //! and a core's moves become visible in program order, which makes the
    //! block what a loop over the region's words as `AtomicU64`s (plain
    //! moves on x86-64) would do, except that the words of one move may
    //! become visible together. The manuals promise less for vector moves
    //! (Intel SDM vol. 3, 9.1.1: an aligned 16-byte move is one atomic
    //! access on processors with AVX; wider moves may be several accesses);
    //! the x86-64 processors this runs on behave so, as `memcpy` into
    //! memory that another thread polls relies on too.

    /// Runs of at least this many words go through this module.
    pub(super) const WORDS: usize = 16;

    /// Whether the 32-byte moves run here (checked once, then cached).
    #[inline(always)]
    pub(super) fn wide() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    macro_rules! copy {
        ($(#[$m:meta])* $name:ident, $big:literal,
         $l0:literal, $l1:literal, $l2:literal, $l3:literal,
         $s0:literal, $s1:literal, $s2:literal, $s3:literal, $step:literal, $end:literal) => {
            $(#[$m])*
            #[inline(always)]
            pub(super) unsafe fn $name(dst: *mut u8, src: *const u8, n: usize) {
                // SAFETY: the caller's contract: every access lies in
                // `[src, src + n)` or `[dst, dst + n)`, the aligned vector
                // moves at aligned addresses of the region's side; the
                // registers written are clobbered under the C ABI.
                unsafe {
                    std::arch::asm!(
                        "2:",
                        $big,
                        "jb 3f",
                        $l0, $l1, $l2, $l3,
                        $s0, $s1, $s2, $s3,
                        $step,
                        "jmp 2b",
                        "3:",
                        "cmp rcx, 8",
                        "jb 4f",
                        "mov rax, [rsi]",
                        "mov [rdi], rax",
                        "add rsi, 8",
                        "add rdi, 8",
                        "sub rcx, 8",
                        "jmp 3b",
                        "4:",
                        $end,
                        inout("rcx") n => _,
                        inout("rsi") src => _,
                        inout("rdi") dst => _,
                        out("rax") _,
                        clobber_abi("C"),
                        options(nostack),
                    );
                }
            }
        };
    }

    copy!(
        /// Copies `n` bytes (a multiple of 8) from `src` (any alignment)
        /// into the region's words at `dst`, in address order, its last
        /// word last, 16 bytes per move.
        ///
        /// # Safety
        /// `dst` is 16-byte aligned and writable for `n` bytes, whole words
        /// of a region's grid; `src` is readable for `n` bytes and does not
        /// overlap them.
        store16, "cmp rcx, 72",
        "movdqu xmm0, [rsi]", "movdqu xmm1, [rsi + 16]",
        "movdqu xmm2, [rsi + 32]", "movdqu xmm3, [rsi + 48]",
        "movdqa [rdi], xmm0", "movdqa [rdi + 16], xmm1",
        "movdqa [rdi + 32], xmm2", "movdqa [rdi + 48], xmm3",
        "add rsi, 64; add rdi, 64; sub rcx, 64", ""
    );
    copy!(
        /// Copies `n` bytes (a multiple of 8) of the region's words at `src`
        /// to `dst` (any alignment), in address order, 16 bytes per move.
        ///
        /// # Safety
        /// `src` is 16-byte aligned and readable for `n` bytes, whole words
        /// of a region's grid; `dst` is writable for `n` bytes and does not
        /// overlap them.
        load16, "cmp rcx, 72",
        "movdqa xmm0, [rsi]", "movdqa xmm1, [rsi + 16]",
        "movdqa xmm2, [rsi + 32]", "movdqa xmm3, [rsi + 48]",
        "movdqu [rdi], xmm0", "movdqu [rdi + 16], xmm1",
        "movdqu [rdi + 32], xmm2", "movdqu [rdi + 48], xmm3",
        "add rsi, 64; add rdi, 64; sub rcx, 64", ""
    );
    copy!(
        /// [`store16`] with 32-byte moves (AVX2).
        ///
        /// # Safety
        /// As [`store16`], with `dst` 32-byte aligned; the processor has AVX2.
        store32, "cmp rcx, 136",
        "vmovdqu ymm0, [rsi]", "vmovdqu ymm1, [rsi + 32]",
        "vmovdqu ymm2, [rsi + 64]", "vmovdqu ymm3, [rsi + 96]",
        "vmovdqa [rdi], ymm0", "vmovdqa [rdi + 32], ymm1",
        "vmovdqa [rdi + 64], ymm2", "vmovdqa [rdi + 96], ymm3",
        "add rsi, 128; add rdi, 128; sub rcx, 128", "vzeroupper"
    );
    copy!(
        /// [`load16`] with 32-byte moves (AVX2).
        ///
        /// # Safety
        /// As [`load16`], with `src` 32-byte aligned; the processor has AVX2.
        load32, "cmp rcx, 136",
        "vmovdqa ymm0, [rsi]", "vmovdqa ymm1, [rsi + 32]",
        "vmovdqa ymm2, [rsi + 64]", "vmovdqa ymm3, [rsi + 96]",
        "vmovdqu [rdi], ymm0", "vmovdqu [rdi + 32], ymm1",
        "vmovdqu [rdi + 64], ymm2", "vmovdqu [rdi + 96], ymm3",
        "add rsi, 128; add rdi, 128; sub rcx, 128", "vzeroupper"
    );
}

/// Stores `count` words from `src` (any alignment) into the aligned words
/// at `at`, four at a time (a long run: `vector` on x86-64).
///
/// # Safety
/// `at` is 8-byte aligned and its `count` words are whole words of a
/// region's grid; `src` is readable for `8 * count` bytes and does not
/// overlap them.
#[inline(always)]
unsafe fn store_words(at: *mut u8, src: *const u8, count: usize) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri), not(rmr_plain_words)))]
    if count >= vector::WORDS {
        // Everything this thread wrote before goes first (Release).
        std::sync::atomic::fence(Ordering::Release);
        let wide = vector::wide();
        let align = if wide { 32 } else { 16 };
        // Words one by one up to the vector alignment (at most three).
        let skip = (align - at.addr() % align) % align / 8;
        // SAFETY: the caller's contract: `skip` first words, then the rest
        // (at least 13 words) from an address aligned to the vector size.
        unsafe {
            for i in 0..skip {
                let v = src.add(8 * i).cast::<u64>().read_unaligned();
                AtomicU64::from_ptr(at.add(8 * i).cast()).store(v, Ordering::Release);
            }
            let (at, src, n) = (at.add(8 * skip), src.add(8 * skip), 8 * (count - skip));
            if wide { vector::store32(at, src, n) } else { vector::store16(at, src, n) }
        }
        return;
    }
    let (w, s) = (at.cast::<u64>(), src.cast::<u64>());
    let mut i = 0;
    while i + 4 <= count {
        // SAFETY: words i..i + 4 of both (the caller's contract).
        unsafe {
            let (v0, v1) = (s.add(i).read_unaligned(), s.add(i + 1).read_unaligned());
            let (v2, v3) = (s.add(i + 2).read_unaligned(), s.add(i + 3).read_unaligned());
            AtomicU64::from_ptr(w.add(i)).store(v0, Ordering::Release);
            AtomicU64::from_ptr(w.add(i + 1)).store(v1, Ordering::Release);
            AtomicU64::from_ptr(w.add(i + 2)).store(v2, Ordering::Release);
            AtomicU64::from_ptr(w.add(i + 3)).store(v3, Ordering::Release);
        }
        i += 4;
    }
    while i < count {
        // SAFETY: word i of both (the caller's contract).
        unsafe {
            AtomicU64::from_ptr(w.add(i)).store(s.add(i).read_unaligned(), Ordering::Release)
        };
        i += 1;
    }
}

/// Loads the `count` aligned words at `at` into `dst` (any alignment),
/// four at a time (a long run: `vector` on x86-64).
///
/// # Safety
/// As [`store_words`], with `dst` writable for `8 * count` bytes.
#[inline(always)]
unsafe fn load_words(at: *mut u8, dst: *mut u8, count: usize) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri), not(rmr_plain_words)))]
    if count >= vector::WORDS {
        let wide = vector::wide();
        let align = if wide { 32 } else { 16 };
        let skip = (align - at.addr() % align) % align / 8;
        // SAFETY: as in `store_words`.
        unsafe {
            for i in 0..skip {
                let v = AtomicU64::from_ptr(at.add(8 * i).cast()).load(Ordering::Acquire);
                dst.add(8 * i).cast::<u64>().write_unaligned(v);
            }
            let (at, dst, n) = (at.add(8 * skip), dst.add(8 * skip), 8 * (count - skip));
            if wide { vector::load32(dst, at, n) } else { vector::load16(dst, at, n) }
        }
        // What this thread reads next comes after (Acquire).
        std::sync::atomic::fence(Ordering::Acquire);
        return;
    }
    let (w, d) = (at.cast::<u64>(), dst.cast::<u64>());
    let mut i = 0;
    while i + 4 <= count {
        // SAFETY: words i..i + 4 of both (the caller's contract).
        unsafe {
            let v0 = AtomicU64::from_ptr(w.add(i)).load(Ordering::Acquire);
            let v1 = AtomicU64::from_ptr(w.add(i + 1)).load(Ordering::Acquire);
            let v2 = AtomicU64::from_ptr(w.add(i + 2)).load(Ordering::Acquire);
            let v3 = AtomicU64::from_ptr(w.add(i + 3)).load(Ordering::Acquire);
            d.add(i).write_unaligned(v0);
            d.add(i + 1).write_unaligned(v1);
            d.add(i + 2).write_unaligned(v2);
            d.add(i + 3).write_unaligned(v3);
        }
        i += 4;
    }
    while i < count {
        // SAFETY: word i of both (the caller's contract).
        unsafe { d.add(i).write_unaligned(AtomicU64::from_ptr(w.add(i)).load(Ordering::Acquire)) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (offset, length) of a region starting `skew` bytes past a
    /// word boundary: stores land where they should and nowhere else, and
    /// loads read them back.
    #[test]
    fn every_offset_and_length_round_trips() {
        let mut backing = vec![0u64; 40];
        // Miri (CI runs this module's tests under it) takes the short list;
        // the long lengths take the machine-code runs on x86-64.
        let lens: &[usize] =
            if cfg!(miri) { &[0, 9, 23] } else { &[0, 1, 7, 8, 9, 23, 40, 48, 150, 300] };
        for skew in (0..8).step_by(if cfg!(miri) { 3 } else { 1 }) {
            for &len in lens {
                let len = len.min(320 - skew);
                for off in 0..=len {
                    for n in 0..=(len - off) {
                        backing.iter_mut().for_each(|w| *w = 0);
                        let base = backing.as_mut_ptr().cast::<u8>().wrapping_add(skew);
                        let span = Span::new(base, len);
                        let src: Vec<u8> = (0..n).map(|i| 0x80 | i as u8).collect();
                        // SAFETY: in bounds; `src` is a distinct buffer.
                        unsafe { span.store(off, src.as_ptr(), n) };
                        let mut out = vec![0u8; len];
                        // SAFETY: in bounds; `out` is a distinct buffer.
                        unsafe { span.load(0, out.as_mut_ptr(), len) };
                        let mut want = vec![0u8; len];
                        want[off..off + n].copy_from_slice(&src);
                        assert_eq!(out, want, "skew {skew} len {len} off {off} n {n}");
                        let all: Vec<u8> = backing.iter().flat_map(|w| w.to_ne_bytes()).collect();
                        assert!(
                            all[..skew].iter().chain(&all[skew + len..]).all(|&b| b == 0),
                            "a byte outside the span changed: skew {skew} len {len} off {off} n {n}"
                        );
                    }
                }
            }
        }
    }

    /// Both widths of the machine-code copies (the 32-byte one only where
    /// the processor has AVX2), at every length up to 400 bytes: exactly
    /// the bytes asked for move, in both directions.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2", not(miri), not(rmr_plain_words)))]
    fn both_vector_widths_move_exactly_their_bytes() {
        #[repr(C, align(32))]
        struct Block([u8; 416]);
        let src: Vec<u8> = (0..416).map(|i| (i * 13 % 251) as u8 + 1).collect();
        type Copy = unsafe fn(*mut u8, *const u8, usize);
        let mut ways: Vec<(&str, Copy, Copy)> = vec![("16", vector::store16, vector::load16)];
        if vector::wide() {
            ways.push(("32", vector::store32, vector::load32));
        }
        for (w, store, load) in ways {
            for n in (8..=400).step_by(8) {
                let mut region = Block([0; 416]);
                // SAFETY: `region` is 32-byte aligned and holds 416 bytes;
                // `src` is a distinct buffer of 416.
                unsafe { store(region.0.as_mut_ptr(), src.as_ptr(), n) };
                assert_eq!(&region.0[..n], &src[..n], "store{w} of {n} bytes");
                assert!(region.0[n..].iter().all(|&b| b == 0), "store{w} of {n} went past");
                let mut out = vec![0u8; n + 9];
                // SAFETY: as above, `out` a distinct buffer of n + 9 bytes
                // written from its byte 1 (any alignment).
                unsafe { load(out.as_mut_ptr().add(1), region.0.as_ptr(), n) };
                assert_eq!(&out[1..=n], &src[..n], "load{w} of {n} bytes");
                assert!(out[0] == 0 && out[n + 1..].iter().all(|&b| b == 0), "load{w} of {n}");
            }
        }
    }

    #[test]
    fn overlapping_copies_within_one_span_move_like_memmove() {
        let mut backing = vec![0u64; 256];
        let base = backing.as_mut_ptr().cast::<u8>().wrapping_add(3);
        let len = 2000;
        let span = Span::new(base, len);
        for (from, to, n) in [(0usize, 5usize, 1500usize), (700, 1, 1200), (10, 10, 64)] {
            let init: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            // SAFETY: in bounds; distinct buffers.
            unsafe { span.store(0, init.as_ptr(), len) };
            let mut want = init.clone();
            want.copy_within(from..from + n, to);
            // SAFETY: both ranges in bounds of the one span.
            unsafe { span.copy_from(to, &span, from, n) };
            let mut out = vec![0u8; len];
            // SAFETY: in bounds.
            unsafe { span.load(0, out.as_mut_ptr(), len) };
            assert_eq!(out, want, "copy {n} bytes from {from} to {to}");
        }
    }

    #[test]
    fn fill_sets_exactly_its_range() {
        let mut backing = vec![0u64; 200];
        let base = backing.as_mut_ptr().cast::<u8>().wrapping_add(1);
        let span = Span::new(base, 1500);
        // SAFETY: in bounds.
        unsafe { span.fill(3, 1200, 0xab) };
        let mut out = vec![0u8; 1500];
        // SAFETY: in bounds.
        unsafe { span.load(0, out.as_mut_ptr(), 1500) };
        assert!(out[..3].iter().all(|&b| b == 0));
        assert!(out[3..1203].iter().all(|&b| b == 0xab));
        assert!(out[1203..].iter().all(|&b| b == 0));
    }
}
