//! The barrier's schedule: who signals whom and who waits for whom, round
//! by round (Gupta et al.'s pairwise exchange). Pure: no IO, no time.
//!
//! With `n` participants and `m` the largest power of two `<= n`:
//!
//! - **fold-in** (only when `n > m`): each *extra* participant `e >= m`
//!   signals its partner `e - m`, which waits for it;
//! - **recursive doubling**, rounds `k = 0..log2 m`: participant `i < m`
//!   signals `i ^ 2^k` and waits for it;
//! - **fold-out** (only when `n > m`): `e - m` releases `e`.
//!
//! That is `log2 m` rounds for a power of two, `log2 m + 2` otherwise. In
//! a round a participant signals before it waits. Every ordered pair
//! (sender, receiver) carries at most one signal per barrier, so a signal
//! can be the barrier's sequence number written into the receiver's slot
//! for that sender, and "arrived" is "slot >= the sequence number I
//! expect": a later barrier's signal only raises the value. (The
//! implementation gives each slot one word per barrier parity, so that a
//! transport whose writes may overtake each other — several rails — cannot
//! overwrite barrier `s + 1`'s number with barrier `s`'s; the model test
//! below shows both hazards and that the implementation avoids them.)

/// What one participant does in one round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Signal this participant first (RDMA-write the sequence number, or send it).
    pub signal: Option<usize>,
    /// Then wait for this participant's signal.
    pub wait: Option<usize>,
}

/// The largest power of two `<= n` (`n >= 1`).
fn pow2_floor(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// Number of rounds for `n` participants: `log2 m`, plus 2 when `n` is not
/// a power of two (0 for `n <= 1`).
pub fn rounds(n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let m = pow2_floor(n);
    m.trailing_zeros() as usize + if n > m { 2 } else { 0 }
}

/// The rounds of participant `me` (`0..n`), `rounds(n)` entries, some of
/// them idle (neither signal nor wait).
///
/// # Panics
/// When `me >= n`.
pub fn steps(n: usize, me: usize) -> Vec<Step> {
    assert!(me < n, "participant {me} of {n}");
    let mut out = Vec::with_capacity(rounds(n));
    if n <= 1 {
        return out;
    }
    let m = pow2_floor(n);
    let folded = n > m;
    let extra_partner = (me < m && me + m < n).then_some(me + m);
    if folded {
        out.push(if me >= m {
            Step { signal: Some(me - m), wait: None }
        } else {
            Step { signal: None, wait: extra_partner }
        });
    }
    for k in 0..m.trailing_zeros() {
        out.push(if me >= m {
            Step::default()
        } else {
            let p = me ^ (1 << k);
            Step { signal: Some(p), wait: Some(p) }
        });
    }
    if folded {
        out.push(if me >= m {
            Step { signal: None, wait: Some(me - m) }
        } else {
            Step { signal: extra_partner, wait: None }
        });
    }
    out
}

/// Every participant `me` ever exchanges with (signals or waits for): the
/// endpoints a barrier needs.
pub fn partners(n: usize, me: usize) -> Vec<usize> {
    let mut p: Vec<usize> =
        steps(n, me).iter().flat_map(|s| s.signal.into_iter().chain(s.wait)).collect();
    p.sort_unstable();
    p.dedup();
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Lock-step check of the whole schedule: every wait has its signal in
    /// the same round, no ordered pair is used twice, and at the end every
    /// participant has (transitively) heard from every other — so nobody
    /// leaves before all have entered. Knowledge is a bit set (n <= 64).
    fn check(all: &[Vec<Step>]) -> Result<(), String> {
        let n = all.len();
        let r = rounds(n);
        let mut know: Vec<u64> = (0..n).map(|p| 1u64 << p).collect();
        let mut used = std::collections::HashSet::new();
        #[allow(clippy::needless_range_loop)] // rounds index every participant's plan
        for round in 0..r {
            let sent: Vec<Option<(usize, u64)>> =
                (0..n).map(|p| all[p][round].signal.map(|q| (q, know[p]))).collect();
            for p in 0..n {
                if let Some(q) = all[p][round].signal {
                    if !used.insert((p, q)) {
                        return Err(format!("{p}->{q} signalled twice"));
                    }
                }
                if let Some(q) = all[p][round].wait {
                    match sent[q] {
                        Some((to, k)) if to == p => know[p] |= k,
                        _ => return Err(format!("{p} waits for {q} in round {round}: no signal")),
                    }
                }
            }
            for (p, s) in sent.iter().enumerate() {
                if let Some((q, _)) = s {
                    if all[*q][round].wait != Some(p) {
                        return Err(format!("signal {p}->{q} in round {round} is never awaited"));
                    }
                }
            }
        }
        let full = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        match know.iter().position(|&k| k != full) {
            Some(p) => Err(format!("{p} leaves knowing only {:#b}", know[p])),
            None => Ok(()),
        }
    }

    #[test]
    fn every_size_up_to_64_is_a_barrier_in_log2_plus_2_rounds() {
        for n in 1..=64usize {
            let all: Vec<Vec<Step>> = (0..n).map(|me| steps(n, me)).collect();
            assert!(all.iter().all(|s| s.len() == rounds(n)));
            check(&all).unwrap_or_else(|e| panic!("n={n}: {e}"));
            let lg = (n as f64).log2().floor() as usize;
            assert_eq!(rounds(n), if n.is_power_of_two() { lg } else { lg + 2 }, "n={n}");
        }
    }

    #[test]
    fn the_checker_catches_a_missing_fold_out_wait() {
        let mut all: Vec<Vec<Step>> = (0..5).map(|me| steps(5, me)).collect();
        let last = all[4].len() - 1;
        all[4][last].wait = None; // the extra leaves without its release
        assert!(check(&all).is_err());
    }

    #[test]
    fn partners_of_a_folded_size() {
        assert_eq!(partners(6, 0), [1, 2, 4]);
        assert_eq!(partners(6, 5), [1]);
        assert_eq!(partners(6, 3), [1, 2]);
        assert!(partners(1, 0).is_empty());
    }

    /// How the modelled transport and barrier behave.
    #[derive(Clone, Copy)]
    struct Model {
        /// Source word per barrier parity (else one word).
        double_src: bool,
        /// Receiver slot word per barrier parity (else one word).
        parity_slots: bool,
        /// Writes of one (sender, receiver) pair land in posting order
        /// (one TCP stream, one RC queue pair); else in any order (several
        /// rails of a multirail endpoint).
        fifo: bool,
    }

    const IMPL: Model = Model { double_src: true, parity_slots: true, fifo: false };

    /// An asynchronous run of `barriers` back-to-back barriers: writes land
    /// at random times, processes advance in random order. A write reads
    /// its source word when it lands (as a NIC or a queued zero-copy send
    /// may) and overwrites its slot word.
    fn simulate(n: usize, barriers: u64, seed: u64, m: Model) -> Result<(), String> {
        #[derive(Clone, Copy)]
        struct P {
            seq: u64,
            step: usize,
            signalled: bool,
            done: bool,
        }
        let mut x = seed | 1;
        let mut rnd = |k: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % k as u64) as usize
        };
        let par = |on: bool, seq: u64| if on { (seq & 1) as usize } else { 0 };
        let plan: Vec<Vec<Step>> = (0..n).map(|me| steps(n, me)).collect();
        // Everyone starts "after barrier 0", about to enter barrier 1.
        let mut ps: Vec<P> = (0..n)
            .map(|me| P { seq: 0, step: plan[me].len(), signalled: false, done: false })
            .collect();
        let mut entered = vec![0u64; n];
        let mut src = vec![[0u64; 2]; n];
        let mut slot = vec![vec![[0u64; 2]; n]; n]; // slot[receiver][sender][word]
        // In flight: (sender, receiver, source word, slot word).
        let mut wire: Vec<(usize, usize, usize, usize)> = Vec::new();
        let mut idle = 0;
        while ps.iter().any(|p| !p.done) {
            if idle > 100_000 {
                return Err("deadlock".into());
            }
            // Land a write, or advance a random process.
            if !wire.is_empty() && rnd(8) == 0 {
                let mut i = rnd(wire.len());
                if m.fifo {
                    let (s, r, ..) = wire[i];
                    i = wire.iter().position(|&(a, b, ..)| a == s && b == r).expect("pair");
                }
                let (s, r, w, d) = wire.remove(i);
                slot[r][s][d] = src[s][w];
                idle = 0;
                continue;
            }
            let me = rnd(n);
            let p = ps[me];
            if p.done {
                idle += 1;
                continue;
            }
            if p.step == plan[me].len() {
                // Leave barrier p.seq: everybody must have entered it.
                if p.seq > 0 {
                    if let Some(q) = (0..n).find(|&q| entered[q] < p.seq) {
                        return Err(format!("{me} left barrier {} before {q} entered", p.seq));
                    }
                }
                if p.seq == barriers {
                    ps[me].done = true;
                    continue;
                }
                let seq = p.seq + 1;
                entered[me] = seq;
                src[me][par(m.double_src, seq)] = seq;
                ps[me] = P { seq, step: 0, signalled: false, done: false };
                idle = 0;
                continue;
            }
            let st = plan[me][p.step];
            if !p.signalled {
                if let Some(q) = st.signal {
                    wire.push((me, q, par(m.double_src, p.seq), par(m.parity_slots, p.seq)));
                }
                ps[me].signalled = true;
                idle = 0;
                continue;
            }
            match st.wait {
                Some(q) if slot[me][q][par(m.parity_slots, p.seq)] < p.seq => idle += 1,
                _ => {
                    ps[me].step += 1;
                    ps[me].signalled = false;
                    idle = 0;
                }
            }
        }
        Ok(())
    }

    #[test]
    fn the_model_sees_the_hazards_the_implementation_avoids() {
        let fails =
            |m: Model| (0..2000u64).any(|seed| (2..6).any(|n| simulate(n, 30, seed, m).is_err()));
        // One source word: a late write carries the next barrier's number.
        assert!(fails(Model { double_src: false, parity_slots: false, fifo: true }));
        // One slot word and writes that overtake each other (multirail): a
        // late write of barrier s overwrites barrier s+1's number.
        assert!(fails(Model { double_src: true, parity_slots: false, fifo: false }));
        // What the implementation does holds in both transports.
        assert!(!fails(IMPL));
        assert!(!fails(Model { fifo: true, ..IMPL }));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn async_back_to_back_barriers_hold(n in 1usize..=64, seed in any::<u64>(), b in 1u64..5) {
            prop_assert_eq!(simulate(n, b, seed, IMPL), Ok(()));
        }
    }
}
