//! A receive that completes on a rail while no receive (or error) is queued
//! there goes to the user's EVD from the thread that read it off the socket (no
//! hand-off through the rail's EVD). It must still be the user's event in
//! every respect: the multirail EP's id, the user's cookie, the payload, in
//! posting order. Real TCP rails on loopback,
//! both engines, a waiter on each side (a ping-pong). With a 4 KiB write
//! before each message (suppressed by the user, signalled on its rail), the
//! write's completion queues on the rail ahead of the answer: the answer
//! still goes direct (it overtakes a request completion, never a receive).

use rmr_api::Cookie;
use rmr_api::provider::conformance::{Buf, Pair, Target, ep_count, next_dto};
use rmr_api::{Access, DtoFlags, DtoOp};

fn register() {
    backend_tcp::register();
    multirail::register();
}

/// The RMR context of a peer's buffer.
fn remote(b: &Buf) -> rmr_api::RmrContext {
    b.ctx()
}

/// The ping-pong; `write` > 0: each side writes that many bytes to the
/// other before each message.
fn run(engine: &str, write: u64) {
    let s = format!("multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine={engine}");
    let t = Target::new("multirail-recv-direct", register, &s, &s);
    let p = Pair::new(&t);
    let (rb, sb) =
        (Buf::new(&p.pz_b, 64 * 16, Access::ALL, 0), Buf::new(&p.pz_a, 64 * 16, Access::ALL, 0));
    let (ra, sa) =
        (Buf::new(&p.pz_a, 64 * 16, Access::ALL, 0), Buf::new(&p.pz_b, 64 * 16, Access::ALL, 0));
    let (wa, wb) =
        (Buf::new(&p.pz_a, 4096, Access::ALL, 0), Buf::new(&p.pz_b, 4096, Access::ALL, 0));
    const N: u64 = 400;
    // Each side's rails learn where a probe may go (a suppressed write), so
    // suppressed sends go silent as in a runtime's ping-pong: no send
    // completion queues ahead of the answer on the rail.
    p.a.post_rdma_write(&[sb.part(0, 8)], (remote(&rb)).at(0), Cookie(1), DtoFlags::SUPPRESS)
        .unwrap();
    p.b.post_rdma_write(&[sa.part(0, 8)], (remote(&ra)).at(0), Cookie(2), DtoFlags::SUPPRESS)
        .unwrap();
    // Receives posted ahead, as a runtime keeps a ring of them.
    for k in 0..16 {
        p.b.post_recv(&[rb.part(k * 64, 64)], Cookie(1000 + k), DtoFlags::empty()).unwrap();
        p.a.post_recv(&[ra.part(k * 64, 64)], Cookie(5000 + k), DtoFlags::empty()).unwrap();
    }
    std::thread::scope(|sc| {
        // B answers every message with its number plus one.
        sc.spawn(|| {
            for i in 0..N {
                let c = next_dto(&p.evd_b);
                assert_eq!((c.op, c.ep), (DtoOp::Recv, p.b.id()), "{c:?}");
                assert!(c.status.is_ok(), "{c:?}");
                assert_eq!(c.cookie.0, 1000 + i, "receives out of order");
                let slot = i % 16;
                let mut b = [0u8; 8];
                rb.mem.read(slot * 64, &mut b).unwrap();
                assert_eq!(u64::from_le_bytes(b), i, "wrong payload");
                p.b.post_recv(&[rb.part(slot * 64, 64)], Cookie(1000 + i + 16), DtoFlags::empty())
                    .unwrap();
                sa.mem.write(slot * 64, &(i + 1).to_le_bytes()).unwrap();
                if write > 0 {
                    p.b.post_rdma_write(
                        &[wb.part(0, write)],
                        (remote(&wa)).at(0),
                        Cookie(3),
                        DtoFlags::SUPPRESS,
                    )
                    .unwrap();
                }
                p.b.post_send(&[sa.part(slot * 64, 64)], Cookie(7), DtoFlags::SUPPRESS).unwrap();
            }
        });
        for i in 0..N {
            let slot = i % 16;
            sb.mem.write(slot * 64, &i.to_le_bytes()).unwrap();
            if write > 0 {
                p.a.post_rdma_write(
                    &[wa.part(0, write)],
                    (remote(&wb)).at(0),
                    Cookie(4),
                    DtoFlags::SUPPRESS,
                )
                .unwrap();
            }
            p.a.post_send(&[sb.part(slot * 64, 64)], Cookie(9), DtoFlags::SUPPRESS).unwrap();
            let c = next_dto(&p.evd_a);
            assert_eq!((c.op, c.ep, c.cookie.0), (DtoOp::Recv, p.a.id(), 5000 + i), "{c:?}");
            let mut b = [0u8; 8];
            ra.mem.read(slot * 64, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), i + 1, "wrong answer");
            p.a.post_recv(&[ra.part(slot * 64, 64)], Cookie(5000 + i + 16), DtoFlags::empty())
                .unwrap();
        }
    });
    for ep in [&p.a, &p.b] {
        let direct = ep_count(&**ep, "recv_direct");
        println!("{engine}, {write} B writes: {direct} of {N} receives delivered directly");
        // Most receives find nobody harvesting the rail and go direct, past
        // the write completions queued there; some meet a harvest and take
        // that way instead. Either way none is lost.
        assert!(direct >= N / 4, "{direct} of {N} receives direct: {:?}", ep.attr().notes);
        assert!(direct <= N, "more direct receives than receives");
    }
}

#[test]
fn receives_go_direct_inline() {
    run("inline", 0);
}

#[test]
fn receives_go_direct_pinned() {
    run("pinned", 0);
}

#[test]
fn receives_go_direct_past_write_completions_inline() {
    run("inline", 4096);
}

#[test]
fn receives_go_direct_past_write_completions_pinned() {
    run("pinned", 4096);
}
