//! EVDs and concurrency: timeouts, thresholds, software events, many EPs
//! on one EVD, threads posting on one EP, a full window as a value.

use super::*;

pub fn evd_wait_timeout(t: &Target) {
    let (ia, _) = t.open();
    let evd = ia.create_evd().unwrap();
    let start = Instant::now();
    assert!(matches!(evd.wait(Some(Duration::from_millis(30)), 1), Err(Error::Timeout)));
    assert!(start.elapsed() >= Duration::from_millis(25));
    assert!(evd.dequeue().is_none());
}

pub fn evd_wait_threshold(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 8, RW, 0);
    let dst = Buf::new(&p.pz_b, 32, RW, 0);
    for i in 0..4 {
        p.b.post_recv(&[dst.part(i * 8, 8)], Cookie(i), F0).unwrap();
    }
    // Fewer than the threshold: times out, and nothing is lost.
    p.a.post_send(&[src.sge()], Cookie(0), DtoFlags::SUPPRESS).unwrap();
    assert!(matches!(p.evd_b.wait(Some(Duration::from_millis(200)), 4), Err(Error::Timeout)));
    for i in 1..4 {
        p.a.post_send(&[src.sge()], Cookie(i), DtoFlags::SUPPRESS).unwrap();
    }
    let first = p.evd_b.wait(Some(WAIT), 4).unwrap();
    assert_eq!(first.as_dto().map(|c| c.cookie), Some(Cookie(0)));
    assert_eq!(p.evd_b.len(), 3, "threshold reached means all four were queued");
}

pub fn evd_software_events(t: &Target) {
    let (ia, _) = t.open();
    let evd = ia.create_evd().unwrap();
    evd.post_software(11).unwrap();
    evd.post_software(12).unwrap();
    assert_eq!(evd.len(), 2);
    assert!(matches!(evd.wait(Some(WAIT), 1), Ok(Event::Software(11))));
    assert!(matches!(evd.dequeue(), Some(Event::Software(12))));
    // Another thread's software event wakes a blocked waiter.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            evd.post_software(13).unwrap();
        });
        assert!(matches!(evd.wait(Some(WAIT), 1), Ok(Event::Software(13))));
    });
}

pub fn many_eps_share_one_evd(t: &Target) {
    let p = Pair::new(t);
    let n_eps = t.n(16, 4);
    let per = 50u64;
    let mut pairs = vec![(p.a.clone(), p.b.clone())];
    while pairs.len() < n_eps {
        pairs.push(p.connect_more(&p.pz_a, &p.evd_a, &p.cevd_a));
    }
    let rbuf = Buf::new(&p.pz_b, n_eps * per as usize * 16, RW, 0);
    let sbuf = Buf::new(&p.pz_a, n_eps * per as usize * 16, RW, 0);
    for (e, (_, b)) in pairs.iter().enumerate() {
        for i in 0..per {
            let off = (e as u64 * per + i) * 16;
            b.post_recv(&[rbuf.part(off, 16)], Cookie(e as u64 * 1000 + i), F0).unwrap();
        }
    }
    for i in 0..per {
        for (e, (a, _)) in pairs.iter().enumerate() {
            let off = (e as u64 * per + i) * 16;
            sbuf.mem
                .write(off, &[(e as u64 * 1000 + i).to_le_bytes(), [0xEE; 8]].concat())
                .unwrap();
            a.post_send(&[sbuf.part(off, 16)], Cookie(i), DtoFlags::SUPPRESS).unwrap();
        }
    }
    let mut next = vec![0u64; n_eps];
    for _ in 0..n_eps as u64 * per {
        let c = next_dto(&p.evd_b);
        assert!(c.status.is_ok());
        let e = pairs.iter().position(|(_, b)| b.id() == c.ep).expect("completion names its EP");
        assert_eq!(c.cookie.0, e as u64 * 1000 + next[e], "per-EP order broken on a shared EVD");
        let off = c.cookie.0 % 1000 * 16 + e as u64 * per * 16;
        let got = rbuf.mem.to_vec(off, 8).unwrap();
        assert_eq!(u64::from_le_bytes(got.try_into().unwrap()), c.cookie);
        next[e] += 1;
    }
}

pub fn threads_posting_on_one_ep(t: &Target) {
    let p = Pair::new(t);
    let threads = 4u64;
    let per = t.n(500, 100) as u64;
    let total = threads * per;
    let rbuf = Buf::new(&p.pz_b, 16 * 256, RW, 0);
    for s in 0..256 {
        p.b.post_recv(&[rbuf.part(s * 16, 16)], Cookie(s), F0).unwrap();
    }
    std::thread::scope(|s| {
        for th in 0..threads {
            let p = &p;
            s.spawn(move || {
                let buf = Buf::new(&p.pz_a, 16 * per as usize, RW, 0);
                for i in 0..per {
                    buf.mem.write(i * 16, &[th.to_le_bytes(), i.to_le_bytes()].concat()).unwrap();
                    loop {
                        match p.a.post_send(
                            &[buf.part(i * 16, 16)],
                            Cookie(th << 32 | i),
                            DtoFlags::SUPPRESS,
                        ) {
                            Ok(()) => break,
                            Err(Error::QueueFull) => std::thread::yield_now(),
                            Err(e) => panic!("post: {e}"),
                        }
                    }
                }
                // Keep the source alive until everything is acknowledged.
                buf
            });
        }
        let mut next = vec![0u64; threads as usize];
        for n in 0..total {
            let c = next_dto(&p.evd_b);
            assert!(c.status.is_ok());
            let slot = c.cookie.0;
            let v = rbuf.mem.to_vec(slot * 16, 16).unwrap();
            let th = u64::from_le_bytes(v[0..8].try_into().unwrap()) as usize;
            let i = u64::from_le_bytes(v[8..16].try_into().unwrap());
            assert!(th < threads as usize, "garbled message");
            assert_eq!(i, next[th], "thread {th}'s sends arrived out of order");
            next[th] += 1;
            if n + 256 < total {
                p.b.post_recv(&[rbuf.part(slot * 16, 16)], Cookie(slot), F0).unwrap();
            }
        }
    });
}

pub fn window_backpressure_is_a_value(t: &Target) {
    let p = Pair::new(t);
    let max = p.a.attr().max_dtos as u64;
    let target = Buf::new(&p.pz_b, 4096, RW, 0);
    let src = Buf::new(&p.pz_a, 4096, RW, 1);
    let mut full = 0;
    let posts = (2 * max).min(t.n(20_000, 2_000) as u64);
    for i in 0..posts {
        match p.a.post_rdma_write(
            &[src.part(i % 512 * 8, 8)],
            target.ctx().at(i % 512 * 8),
            Cookie(i),
            DtoFlags::SUPPRESS,
        ) {
            Ok(()) => {}
            Err(Error::QueueFull) => {
                full += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("unexpected error under load: {e}"),
        }
    }
    p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(u64::MAX), F0).unwrap_or_else(
        |_| {
            // Still full: drain by waiting until a retry succeeds.
            let start = Instant::now();
            loop {
                match p.a.post_rdma_write(&[src.sge()], target.ctx().at(0), Cookie(u64::MAX), F0) {
                    Ok(()) => break,
                    Err(Error::QueueFull) if start.elapsed() < WAIT => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        },
    );
    expect_ok(&p.evd_a, u64::MAX);
    assert_eq!(target.bytes(), vec![1; 4096]);
    println!("window {max}: {full} QueueFull answers out of {posts} posts");
}

/// An event loop on [`Evd::wait_fd`] + [`Evd::arm`] (libfabric's
/// `fi_trywait` rule), as a service with its own loop integrates an EVD:
/// dequeue until empty, arm, sleep in `poll` on the descriptor. Every one
/// of 300 messages (fewer where the EP takes fewer receives), sent at varied moments (some while the loop is between
/// its arm and its sleep), wakes it: a sleep that outlasts 10 s is a lost
/// wake-up. The descriptor exists on every EVD.
pub fn event_loop_arm_and_poll_loses_nothing(t: &Target) {
    let p = Pair::new(t);
    let total = 300.min(p.b.attr().max_recvs as u64);
    let fd_ok = p.evd_b.wait_fd().is_some();
    assert!(fd_ok, "{}: the EVD has no wait fd", t.name);
    let slot = 64u64;
    let inbox = Buf::new(&p.pz_b, (slot * total) as usize, RW, 0);
    for i in 0..total {
        p.b.post_recv(&[inbox.part(i * slot, slot)], Cookie(i), F0).unwrap();
    }
    let src = Buf::new(&p.pz_a, (slot * total) as usize, RW, 0);
    let a = p.a.clone();
    let sender = std::thread::spawn(move || {
        for i in 0..total {
            // (A full send queue is a value: wait for it to drain.)
            loop {
                match a.post_send(&[src.part(i * slot, 8)], Cookie(i), DtoFlags::SUPPRESS) {
                    Ok(()) => break,
                    Err(Error::QueueFull) => std::thread::yield_now(),
                    Err(e) => panic!("send {i}: {e}"),
                }
            }
            // Varied gaps: none, a yield, a few tens of microseconds.
            match i % 3 {
                0 => {}
                1 => std::thread::yield_now(),
                _ => std::thread::sleep(Duration::from_micros(20 * (i % 7))),
            }
        }
        src
    });
    let mut got = vec![false; total as usize];
    let mut n = 0u64;
    let (mut sleeps, mut refused) = (0u64, 0u64);
    while n < total {
        while let Some(ev) = p.evd_b.dequeue() {
            if let Event::Dto(c) = ev {
                assert!(c.status.is_ok(), "{c:?}");
                assert!(!std::mem::replace(&mut got[c.cookie.0 as usize], true), "twice");
                n += 1;
            }
        }
        if n == total {
            break;
        }
        if !p.evd_b.arm() {
            refused += 1;
            continue;
        }
        sleeps += 1;
        let fd = p.evd_b.wait_fd().expect("a wait fd");
        let woke = crate::provider::io::poll_readable(fd, Duration::from_secs(10)).unwrap();
        assert!(
            woke,
            "{}: asleep 10 s with {} of {total} messages received: a lost wake-up",
            t.name, n
        );
    }
    let _src = sender.join().unwrap();
    println!("{}: {total} messages, {sleeps} sleeps on the fd, {refused} arms refused", t.name);
}
