//! A single-producer, single-consumer ring of frames in a shared mapping.
//!
//! Layout at the ring's base: `head` (bytes ever written, the producer's),
//! `tail` (bytes ever consumed, the consumer's), `want_data` (the consumer
//! is about to sleep) and `want_space` (the producer waits for room), each
//! on its own cache line; then `cap` bytes of frames. A frame never wraps:
//! the producer pads the end of the ring instead. The consumer trusts
//! nothing it reads: indices and headers that could not come from an honest
//! producer are an error ([`Ring::peek`]).

use crate::sys::Mapping;
use crate::wire::{HDR, Hdr, Op, frame_size};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes of control lines before a ring's frames.
pub(crate) const CTL: usize = 320;

/// One direction of an EP's connection.
pub(crate) struct Ring {
    map: Arc<Mapping>,
    base: usize,
    cap: u64,
    /// The producer's last look at `tail` (it reads the shared line again
    /// only when this says the ring is too full).
    tail_seen: AtomicU64,
    /// The consumer's own position; the shared `tail` follows it once per
    /// batch ([`Ring::publish`]), not once per frame.
    tail_mine: AtomicU64,
    /// The producer's own position (the shared `head` is only ever
    /// written from it: a peer that rewrites `head` cannot move it).
    head_mine: AtomicU64,
}

impl Ring {
    /// The ring at `base` in `map`, `cap` bytes of frames (a power of two,
    /// at least 4 frames; `base + CTL + cap` within the mapping).
    pub(crate) fn new(map: Arc<Mapping>, base: usize, cap: usize) -> Ring {
        assert!(cap.is_power_of_two() && cap >= 4 * HDR && base % 64 == 0 && CTL % 64 == 0);
        assert!(base + CTL + cap <= map.len());
        Ring {
            map,
            base,
            cap: cap as u64,
            tail_seen: AtomicU64::new(0),
            tail_mine: AtomicU64::new(0),
            head_mine: AtomicU64::new(0),
        }
    }

    fn word(&self, line: usize) -> *mut u8 {
        self.map.ptr().wrapping_add(self.base + 64 * line)
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: an 8-aligned word inside the mapping, which lives as long
        // as self; shared memory is only ever accessed atomically here.
        unsafe { AtomicU64::from_ptr(self.word(0).cast()) }
    }

    fn tail(&self) -> &AtomicU64 {
        // SAFETY: as in `head`.
        unsafe { AtomicU64::from_ptr(self.word(1).cast()) }
    }

    /// The consumer's answer to every request on this ring up to (and
    /// including) `acked - 1` that needs no other answer: beside `tail`, on
    /// the line the consumer writes anyway (0: none yet).
    pub(crate) fn acked(&self) -> &AtomicU64 {
        // SAFETY: as in `head` (the second word of the tail's line).
        unsafe { AtomicU64::from_ptr(self.word(1).wrapping_add(8).cast()) }
    }

    /// Set by the consumer before it sleeps; the producer that finds it set
    /// clears it and rings the consumer's doorbell.
    pub(crate) fn want_data(&self) -> &AtomicU32 {
        // SAFETY: as in `head`.
        unsafe { AtomicU32::from_ptr(self.word(2).cast()) }
    }

    /// Set by the producer when the ring is full; the consumer that frees
    /// room and finds it set clears it and rings the producer's doorbell.
    pub(crate) fn want_space(&self) -> &AtomicU32 {
        // SAFETY: as in `head`.
        unsafe { AtomicU32::from_ptr(self.word(3).cast()) }
    }

    /// Cross-memory accesses the producer side has in flight to the
    /// consumer's memory (from its table lookup to the end of the system
    /// call): the consumer's deregistration waits for it to be 0.
    pub(crate) fn cma_busy(&self) -> &AtomicU64 {
        // SAFETY: as in `head`.
        unsafe { AtomicU64::from_ptr(self.word(4).cast()) }
    }

    /// Consumer: bytes the producer has published so far.
    pub(crate) fn produced(&self) -> u64 {
        self.head().load(Ordering::SeqCst)
    }

    /// Consumer: bytes taken so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.tail_mine.load(Ordering::Relaxed)
    }

    fn data(&self, pos: u64) -> *mut u8 {
        self.map.ptr().wrapping_add(self.base + CTL + pos as usize)
    }

    /// The most payload one frame carries.
    pub(crate) fn max_chunk(&self) -> usize {
        (self.cap as usize / 4 - HDR).min(64 << 10)
    }

    /// True when frames wait for the consumer.
    pub(crate) fn has_data(&self) -> bool {
        self.head().load(Ordering::SeqCst) != self.tail_mine.load(Ordering::Relaxed)
    }

    /// Producer: appends a frame of `h` whose `len` payload bytes `fill`
    /// writes to the pointer it is given; false (nothing written) when
    /// the ring has no room for it now.
    pub(crate) fn push(&self, h: &Hdr, fill: &mut dyn FnMut(*mut u8)) -> bool {
        let need = frame_size(h.len as usize) as u64;
        let mut head = self.head_mine.load(Ordering::Relaxed);
        let pos = head & (self.cap - 1);
        let to_end = self.cap - pos;
        let pad = if to_end < need { to_end } else { 0 };
        let free = |tail: u64| self.cap - head.wrapping_sub(tail).min(self.cap);
        if free(self.tail_seen.load(Ordering::Relaxed)) < need + pad {
            // SeqCst: the re-check after `want_space` is set (Dekker with
            // the consumer's store of `tail` and load of the flag).
            let tail = self.tail().load(Ordering::SeqCst);
            self.tail_seen.store(tail, Ordering::Relaxed);
            if free(tail) < need + pad {
                return false;
            }
        }
        if pad > 0 {
            let mut p = Hdr::new(Op::Pad);
            p.len = (pad - HDR as u64) as u32;
            self.put_hdr(pos, &p);
            head += pad;
        }
        let pos = head & (self.cap - 1);
        self.put_hdr(pos, h);
        if h.len > 0 {
            fill(self.data(pos + HDR as u64));
        }
        self.head_mine.store(head + need, Ordering::Relaxed);
        self.head().store(head + need, Ordering::SeqCst);
        true
    }

    fn put_hdr(&self, pos: u64, h: &Hdr) {
        let p = self.data(pos).cast::<u64>();
        for (i, w) in h.to_words().into_iter().enumerate() {
            // SAFETY: `pos` is 64-aligned and the frame lies in the ring's
            // free space, which the consumer does not read until `head`
            // moves past it.
            unsafe { p.add(i).write_volatile(w) };
        }
    }

    /// Consumer: the next frame (padding skipped), with a pointer to its
    /// payload, or `None` when the ring is empty.
    ///
    /// # Errors
    /// A description, when the indices or the header could not come from an
    /// honest producer (the caller breaks the connection).
    pub(crate) fn peek(&self) -> Result<Option<(Hdr, *const u8)>, String> {
        loop {
            let tail = self.tail_mine.load(Ordering::Relaxed);
            let head = self.head().load(Ordering::SeqCst);
            let used = head.wrapping_sub(tail);
            if used == 0 {
                return Ok(None);
            }
            if used > self.cap || used % HDR as u64 != 0 {
                return Err(format!("ring indices corrupt (head {head}, tail {tail})"));
            }
            let pos = tail & (self.cap - 1);
            let p = self.data(pos).cast::<u64>();
            let mut w = [0u64; 8];
            for (i, x) in w.iter_mut().enumerate() {
                // SAFETY: inside the ring, 64-aligned; the bytes are the
                // consumer's until it moves `tail`.
                *x = unsafe { p.add(i).read_volatile() };
            }
            let h = Hdr::from_words(w);
            let size = frame_size(h.len as usize) as u64;
            if size > used || pos + size > self.cap {
                return Err(format!("frame of {} bytes overruns the ring", h.len));
            }
            if h.op == Op::Pad as u8 {
                self.tail_mine.store(tail + size, Ordering::Relaxed);
                continue;
            }
            return Ok(Some((h, self.data(pos + HDR as u64))));
        }
    }

    /// A producer that breaks the protocol (tests and fuzzing only): copies
    /// `bytes` to the ring from the producer's position on, wrapping, and
    /// moves the published `head` by `advance` whatever it is. Its own next
    /// position stays frame-aligned (rounded up), so that the frames this
    /// producer later writes honestly (its endpoint's answers, its
    /// disconnect) are aligned stores; the consumer sees the raw `head`.
    pub(crate) fn raw_produce(&self, bytes: &[u8], advance: u64) {
        let head = self.head_mine.load(Ordering::Relaxed);
        for (i, b) in bytes.iter().take(self.cap as usize).enumerate() {
            let pos = (head + i as u64) & (self.cap - 1);
            // SAFETY: inside the ring's data area (masked position); a byte
            // store the consumer may race with is what this simulates.
            unsafe { self.data(pos).write_volatile(*b) };
        }
        let raw = head.wrapping_add(advance);
        self.head_mine
            .store(raw.wrapping_add(HDR as u64 - 1) & !(HDR as u64 - 1), Ordering::Relaxed);
        self.head().store(raw, Ordering::SeqCst);
    }

    /// Consumer: done with the frame [`Ring::peek`] returned (the room is
    /// the producer's again at the next [`Ring::publish`]).
    pub(crate) fn consume(&self, h: &Hdr) {
        let tail = self.tail_mine.load(Ordering::Relaxed);
        self.tail_mine.store(tail + frame_size(h.len as usize) as u64, Ordering::Relaxed);
    }

    /// Consumer: gives the producer the room consumed since the last call,
    /// and with `acked` (`seq + 1`), answers every request up to `seq` that
    /// needs no other answer. True when the shared line changed.
    pub(crate) fn publish(&self, acked: Option<u64>) -> bool {
        let mine = self.tail_mine.load(Ordering::Relaxed);
        let mut moved = false;
        if let Some(a) = acked {
            self.acked().store(a, Ordering::SeqCst);
            moved = true;
        }
        if self.tail().load(Ordering::Relaxed) != mine {
            self.tail().store(mine, Ordering::SeqCst);
            moved = true;
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_wrap_with_padding_and_bad_indices_are_refused() {
        let (m, _fd) = Mapping::create("t", CTL + 1024, false).unwrap();
        let r = Ring::new(m, 0, 1024);
        let mut seen = Vec::new();
        for i in 0..40u64 {
            let mut h = Hdr::new(Op::Send);
            h.seq = i;
            h.len = (i % 3 * 50) as u32;
            let len = h.len as usize;
            assert!(r.push(&h, &mut |p| {
                // SAFETY: the ring gives `len` writable bytes at p.
                unsafe { std::ptr::write_bytes(p, i as u8, len) }
            }));
            let (g, p) = r.peek().unwrap().unwrap();
            assert_eq!(g, h);
            if len > 0 {
                // SAFETY: the frame's payload, the consumer's until consumed.
                assert_eq!(unsafe { *p.add(len - 1) }, i as u8);
            }
            r.consume(&g);
            r.publish(None);
            seen.push(g.seq);
        }
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
        // Fill it: pushes fail without writing.
        let h = Hdr::new(Op::Send);
        let mut n = 0;
        while r.push(&h, &mut |_| {}) {
            n += 1;
        }
        assert_eq!(n, 1024 / 64);
        // A producer that lies about head.
        r.head().store(r.tail_mine.load(Ordering::Relaxed) + 4096, Ordering::SeqCst);
        assert!(r.peek().is_err());
    }
}
