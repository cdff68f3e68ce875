//! Send and receive: order under load, zero length, the solicited flag,
//! a receive too small.

use super::*;

pub fn send_recv_basic(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 256, RW, 0);
    src.mem.write(0, &pattern(1, 256)).unwrap();
    let dst = Buf::new(&p.pz_b, 256, RW, 0xee);
    p.b.post_recv(&[dst.sge()], Cookie(10), F0).unwrap();
    p.a.post_send(&[src.sge()], Cookie(20), F0).unwrap();
    let c = expect_ok(&p.evd_b, 10);
    assert_eq!((c.op, c.bytes, c.ep), (DtoOp::Recv, 256, p.b.id()));
    let c = expect_ok(&p.evd_a, 20);
    assert_eq!((c.op, c.ep), (DtoOp::Send, p.a.id()));
    assert_eq!(dst.bytes(), pattern(1, 256));
}

pub fn send_recv_in_order_under_load(t: &Target) {
    let p = Pair::new(t);
    let n = t.n(10_000, 1000) as u64;
    const SLOTS: u64 = 64;
    const MAX: u64 = 2048;
    let rbuf = Buf::new(&p.pz_b, (SLOTS * MAX) as usize, RW, 0);
    for i in 0..SLOTS {
        p.b.post_recv(&[rbuf.part(i * MAX, MAX)], Cookie(i), F0).unwrap();
    }
    let sbuf = Buf::new(&p.pz_a, (SLOTS * MAX) as usize, RW, 0);
    let msg = |i: u64| {
        let len = 16 + (i * 37 % (MAX - 16));
        let mut m = i.to_le_bytes().to_vec();
        m.extend_from_slice(&pattern(i, len as usize - 16));
        let sum = checksum(&m);
        m.extend_from_slice(&sum.to_le_bytes());
        m
    };
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            let mut outstanding = 0u64;
            for i in 0..n {
                if outstanding == SLOTS {
                    let c = next_dto(&p.evd_a);
                    assert!(c.status.is_ok(), "send failed: {c:?}");
                    outstanding -= 1;
                }
                let m = msg(i);
                let slot = i % SLOTS;
                sbuf.mem.write(slot * MAX, &m).unwrap();
                p.a.post_send(&[sbuf.part(slot * MAX, m.len() as u64)], Cookie(i), F0).unwrap();
                outstanding += 1;
            }
            for _ in 0..outstanding {
                assert!(next_dto(&p.evd_a).status.is_ok());
            }
        });
        for i in 0..n {
            let c = next_dto(&p.evd_b);
            assert!(c.status.is_ok(), "recv {i} failed: {c:?}");
            let slot = c.cookie.0;
            assert_eq!(slot, i % SLOTS, "receives completed out of order");
            let got = rbuf.mem.to_vec(slot * MAX, c.bytes as usize).unwrap();
            assert_eq!(got, msg(i), "message {i} corrupted or out of order");
            if i + SLOTS < n {
                p.b.post_recv(&[rbuf.part(slot * MAX, MAX)], Cookie(slot), F0).unwrap();
            }
        }
        sender.join().unwrap();
    });
}

pub fn zero_length_send(t: &Target) {
    let p = Pair::new(t);
    let dst = Buf::new(&p.pz_b, 64, RW, 7);
    p.b.post_recv(&[dst.sge()], Cookie(1), F0).unwrap();
    p.a.post_send(&[], Cookie(2), F0).unwrap();
    assert_eq!(expect_ok(&p.evd_b, 1).bytes, 0);
    expect_ok(&p.evd_a, 2);
    assert_eq!(dst.bytes(), vec![7; 64]);
}

pub fn solicited_flag_reaches_receiver(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 8, RW, 1);
    let dst = Buf::new(&p.pz_b, 16, RW, 0);
    p.b.post_recv(&[dst.part(0, 8)], Cookie(1), F0).unwrap();
    p.b.post_recv(&[dst.part(8, 8)], Cookie(2), F0).unwrap();
    p.a.post_send(&[src.sge()], Cookie(1), DtoFlags::SOLICITED | DtoFlags::SUPPRESS).unwrap();
    p.a.post_send(&[src.sge()], Cookie(2), DtoFlags::SUPPRESS).unwrap();
    assert!(expect_ok(&p.evd_b, 1).solicited);
    assert!(!expect_ok(&p.evd_b, 2).solicited);
}

pub fn recv_too_small_errors_nothing_overwritten(t: &Target) {
    let p = Pair::new(t);
    let src = Buf::new(&p.pz_a, 64, RW, 0x11);
    let dst = Buf::new(&p.pz_b, 64, RW, 0xAB);
    p.b.post_recv(&[dst.part(0, 16)], Cookie(5), F0).unwrap();
    p.a.post_send(&[src.sge()], Cookie(6), F0).unwrap();
    let c = next_dto(&p.evd_b);
    assert_eq!(c.cookie.0, 5);
    assert!(!c.status.is_ok(), "an oversize message was accepted: {c:?}");
    assert_eq!(dst.bytes(), vec![0xAB; 64], "receive buffer (or beyond) overwritten");
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie.0, 6);
    if p.ia_a.attr().caps.contains(Caps::OVERRUN_AT_SENDER) {
        assert!(!c.status.is_ok(), "the sender was not told: {c:?}");
    } else {
        skip(t, "the sender's error (provider lacks Caps::OVERRUN_AT_SENDER)");
    }
}
