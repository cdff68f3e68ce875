//! Unit tests of registered memory and its accessors.

use super::*;

#[test]
#[cfg_attr(miri, ignore)] // memfd and mmap
fn a_length_near_usize_max_is_refused_not_wrapped() {
    // Rounded up to whole pages it would wrap to 0: a region that
    // claimed usize::MAX - 1 bytes of a 0-byte block.
    let r = std::panic::catch_unwind(|| MemRegion::new(usize::MAX - 1));
    assert!(r.is_err(), "MemRegion::new(usize::MAX - 1) made a region");
    assert!(MemRegion::shared(usize::MAX - 1).is_err());
    assert!(MemRegion::huge(usize::MAX - 1).is_err());
}

/// A whole aligned word goes in and out atomically (what a poller of
/// an RDMA-written flag reads); other sizes and offsets byte for byte.
#[test]
fn words_are_placed_whole_and_bytes_as_given() {
    let m = MemRegion::new(64);
    let w = 0x0102_0304_0506_0708u64.to_le_bytes();
    m.write(8, &w).unwrap();
    assert_eq!(m.load_u64(8).unwrap(), 0x0102_0304_0506_0708);
    let mut back = [0u8; 8];
    m.read(8, &mut back).unwrap();
    assert_eq!(back, w);
    // Unaligned, and not 8 bytes: parts of words.
    m.write(3, &w).unwrap();
    m.read(3, &mut back).unwrap();
    assert_eq!(back, w);
    m.write(20, &w[..5]).unwrap();
    assert_eq!(m.to_vec(20, 5).unwrap(), &w[..5]);
    let mut dst = [0u64; 2];
    for at in [0, 3] {
        let p = dst.as_mut_ptr().cast::<u8>().wrapping_add(at);
        // SAFETY: `dst` holds 16 bytes, `p` 8 of them from `at`;
        // `w` is a distinct local.
        unsafe { place(w.as_ptr(), p, 8) };
        let mut back = [0u8; 8];
        // SAFETY: as above.
        unsafe { place(p, back.as_mut_ptr(), 8) };
        assert_eq!(back, w, "through a word at byte {at}");
        // SAFETY: `p` is readable for 8 bytes and not the region's.
        unsafe { copy_in(&m, 44, p, 8) }.unwrap();
        assert_eq!(m.to_vec(44, 8).unwrap(), w);
        let mut out = [0u8; 9];
        // SAFETY: `out` is a distinct local of 9 bytes.
        unsafe { copy_out(&m, 43, out.as_mut_ptr(), 9) }.unwrap();
        assert_eq!(&out[1..], w);
    }
    // SAFETY: as above; the range is refused before any copy.
    let far = unsafe { copy_in(&m, 60, w.as_ptr(), 8) };
    assert!(matches!(far, Err(Error::OutOfBounds { .. })));
}

/// Two threads on the same bytes at once, through every accessor: a
/// race of atomics, not undefined behaviour (Miri, which runs this in
/// CI, reported the plain copies these accessors made before as a data
/// race), and a whole aligned word written in one piece is read whole.
#[test]
fn threads_racing_on_the_same_bytes_see_whole_words() {
    let r = MemRegion::new(64);
    let rounds = if cfg!(miri) { 20 } else { 20_000 };
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..rounds {
                let b = if i % 2 == 0 { 0x11 } else { 0x22 };
                r.write(8, &[b; 24]).unwrap();
                r.fill(3, 2, b).unwrap();
                r.write(37, &[b; 5]).unwrap();
                r.copy_from(40, &r, 8, 8).unwrap();
            }
        });
        let mut v = Vec::new();
        for _ in 0..rounds {
            for off in [8, 16, 24] {
                let w = r.load_u64(off).unwrap().to_le_bytes();
                assert!(
                    w == [0; 8] || w == [0x11; 8] || w == [0x22; 8],
                    "torn word at {off}: {w:?}"
                );
            }
            let mut b = [0u8; 29];
            r.read(3, &mut b).unwrap();
            v.clear();
            r.append_to(0, 48, &mut v).unwrap();
            assert_eq!(v.len(), 48);
        }
    });
}

/// Long copies (the machine-code runs on x86-64) racing each other: a
/// reader sees every word whole (its two halves alike), and the last
/// word of a long write, its flag, only after the rest of it.
#[test]
fn long_copies_racing_keep_words_whole_and_the_last_word_last() {
    const LEN: usize = 1024;
    // At 8 the region side starts off a 16- and a 32-byte boundary.
    let r = MemRegion::new(LEN + 16);
    let rounds: u64 = if cfg!(miri) { 4 } else { 4_000 };
    // Round `i`'s copy: every word, the flag (the last) included, holds
    // `i` in both halves, so a word torn between rounds shows.
    let word = |i: u64| i | i << 32;
    let fill = |i: u64| -> Vec<u8> { (0..LEN / 8).flat_map(|_| word(i).to_le_bytes()).collect() };
    let whole = |v: u64, what: &str| {
        assert_eq!(v >> 32, v & 0xffff_ffff, "torn {what}: {v:#x}");
        v >> 32
    };
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 1..=rounds {
                r.write(8, &fill(i)).unwrap();
            }
        });
        let mut b = vec![0u8; LEN];
        let mut seen = 0;
        loop {
            let finished = writer.is_finished();
            let flag = whole(r.load_u64(8 + LEN as u64 - 8).unwrap(), "flag");
            r.read(8, &mut b).unwrap();
            for (k, w) in b.chunks_exact(8).enumerate() {
                let v = whole(u64::from_le_bytes(w.try_into().unwrap()), "word");
                assert!(v >= flag, "word {k} is from round {v}, before the flag's {flag}");
            }
            seen += u64::from(flag > 0);
            if finished {
                assert_eq!(flag, rounds, "the last round's flag");
                break;
            }
        }
        assert!(seen > 0, "the reader never saw a write");
    });
}

#[test]
#[cfg_attr(miri, ignore = "Miri does not emulate memfd_create")]
fn a_shared_region_is_a_sealed_file_another_mapping_sees() {
    let r = MemRegion::shared(10_000).unwrap();
    assert_eq!(r.len(), 10_000);
    assert_eq!(r.addr() % REGION_ALIGN as u64, 0);
    r.write(5, b"shared").unwrap();
    assert!(r.write(9_999, b"xy").is_err(), "bounds are the length asked for");
    let fd = r.shared_file().expect("a file");
    let st = rustix::fs::fstat(fd).unwrap();
    assert_eq!(st.st_size, 12_288, "whole pages");
    let seals = rustix::fs::fcntl_get_seals(fd).unwrap();
    assert!(seals.contains(rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW));
    // What another process would see through its own mapping.
    let mut b = [0u8; 6];
    rustix::io::pread(fd, &mut b, 5).unwrap();
    assert_eq!(&b, b"shared");
    assert!(MemRegion::new(64).shared_file().is_none());
}

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
fn application_buffers_are_taken_in_place_and_given_back() {
    let v: Vec<u8> = (0..100u8).collect();
    let at = v.as_ptr();
    let r = MemRegion::from_vec(v);
    assert_eq!((r.as_ptr().cast_const(), r.len()), (at, 100));
    r.write(0, b"xy").unwrap();
    let held = r.clone(); // as an LMR would hold it
    let r = std::sync::Arc::try_unwrap(r).expect_err("held: cannot be taken back");
    drop(held);
    let v = std::sync::Arc::into_inner(r).unwrap().into_vec().unwrap();
    assert_eq!(&v[..4], b"xy\x02\x03");

    let b: Box<[f64]> = vec![1.5f64; 16].into_boxed_slice();
    let r = MemRegion::from_boxed(b);
    assert_eq!(r.len(), 128);
    assert_eq!(r.to_vec(0, 8).unwrap(), 1.5f64.to_ne_bytes());
    r.store_u64(8, 7).unwrap();
    assert_eq!(r.load_u64(8).unwrap(), 7);
    assert!(std::sync::Arc::into_inner(r).unwrap().into_vec().is_err());

    // An owner that keeps a buffer alive: here a vector of words, so the
    // base is 8-byte aligned.
    let mut words = vec![0u64; 4];
    let p = words.as_mut_ptr().cast::<u8>();
    // SAFETY: `words`' buffer lives as long as the owner (it is the
    // owner), does not move when the vector does, and is not touched
    // through references after this.
    let r = unsafe { MemRegion::from_owner(p, 32, words) }.unwrap();
    r.store_u64(24, 9).unwrap();
    assert_eq!(r.load_u64(24).unwrap(), 9);
    assert!(r.atomic_u64(4).is_err());
}

#[test]
#[cfg_attr(miri, ignore)] // mmap
fn huge_pages_or_a_clear_error() {
    match MemRegion::huge(1 << 20) {
        Ok(r) => {
            assert_eq!(r.as_ptr() as usize % (2 << 20), 0);
            r.write(1000, b"z").unwrap();
            assert_eq!(r.to_vec(1000, 1).unwrap(), b"z");
        }
        Err(e) => {
            println!("no huge pages here: {e}");
            assert!(e.to_string().contains("nr_hugepages"), "{e}");
        }
    }
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
