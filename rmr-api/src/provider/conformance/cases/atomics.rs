//! Remote atomics: fetch-and-add and compare-and-swap from racing
//! initiators, misaligned targets.

use super::*;

fn atomics_or_skip(t: &Target, p: &Pair) -> bool {
    if p.ia_a.attr().caps.contains(Caps::ATOMICS) {
        true
    } else {
        skip(t, "provider has no atomics");
        false
    }
}

pub fn fetch_add_racing_initiators(t: &Target) {
    let p = Pair::new(t);
    if !atomics_or_skip(t, &p) {
        return;
    }
    let (evd2, cevd2) = (p.ia_a.create_evd().unwrap(), p.ia_a.create_evd().unwrap());
    let (a2, _b2) = p.connect_more(&p.pz_a, &evd2, &cevd2);
    let word = Buf::new(&p.pz_b, 64, RW, 0);
    word.mem.store_u64(8, 1000).unwrap();
    let n = t.n(500, 100) as u64;
    let run = |ep: &Arc<dyn Ep>, evd: &Arc<dyn Evd>| {
        let res = Buf::new(&p.pz_a, 8, RW, 0);
        let mut olds = Vec::new();
        for i in 0..n {
            ep.post_fetch_add(res.sge(), word.ctx().at(8), 1, Cookie(i), F0).unwrap();
            let c = expect_ok(evd, i);
            assert_eq!(c.op, DtoOp::FetchAdd);
            let old = u64::from_le_bytes(res.bytes().try_into().unwrap());
            assert_eq!(c.imm, Some(old), "result buffer and completion disagree");
            olds.push(old);
        }
        olds
    };
    let (o1, o2) = std::thread::scope(|s| {
        let h = s.spawn(|| run(&a2, &evd2));
        let o1 = run(&p.a, &p.evd_a);
        (o1, h.join().unwrap())
    });
    assert_eq!(word.mem.load_u64(8).unwrap(), 1000 + 2 * n, "an increment was lost");
    let mut all: Vec<u64> = o1.into_iter().chain(o2).collect();
    all.sort_unstable();
    let want: Vec<u64> = (1000..1000 + 2 * n).collect();
    assert_eq!(all, want, "two fetch-adds saw the same old value");
}

pub fn cmp_swap_racing_initiators(t: &Target) {
    let p = Pair::new(t);
    if !atomics_or_skip(t, &p) {
        return;
    }
    let (evd2, cevd2) = (p.ia_a.create_evd().unwrap(), p.ia_a.create_evd().unwrap());
    let (a2, _b2) = p.connect_more(&p.pz_a, &evd2, &cevd2);
    let word = Buf::new(&p.pz_b, 16, RW, 0);
    let k = t.n(300, 60) as u64;
    // Each initiator increments the word k times with a CAS retry loop.
    let run = |ep: &Arc<dyn Ep>, evd: &Arc<dyn Evd>| {
        let res = Buf::new(&p.pz_a, 8, RW, 0);
        let (mut guess, mut cookie, mut wins) = (0u64, 0u64, 0u64);
        while wins < k {
            ep.post_cmp_swap(
                res.sge(),
                word.ctx().at(0),
                CompareSwap { compare: guess, swap: guess + 1 },
                Cookie(cookie),
                F0,
            )
            .unwrap();
            let c = expect_ok(evd, cookie);
            cookie += 1;
            let old = c.imm.expect("old value");
            if old == guess {
                wins += 1;
                guess += 1;
            } else {
                guess = old;
            }
        }
    };
    std::thread::scope(|s| {
        let h = s.spawn(|| run(&a2, &evd2));
        run(&p.a, &p.evd_a);
        h.join().unwrap();
    });
    assert_eq!(word.mem.load_u64(0).unwrap(), 2 * k, "a compare-and-swap increment was lost");
}

pub fn atomic_misaligned_is_rejected(t: &Target) {
    let p = Pair::new(t);
    if !atomics_or_skip(t, &p) {
        return;
    }
    let word = Buf::new(&p.pz_b, 16, RW, 9);
    let res = Buf::new(&p.pz_a, 8, RW, 0);
    match p.a.post_fetch_add(res.sge(), word.ctx().at(3), 1, Cookie(1), F0) {
        Err(_) => {}
        Ok(()) => {
            let c = next_dto(&p.evd_a);
            assert!(!c.status.is_ok(), "misaligned atomic succeeded");
        }
    }
    assert_eq!(word.bytes(), vec![9; 16]);
}
