//! The small-message round trip of the lab's latency test (each side posts
//! a receive, a suppressed 8-byte RDMA write and a suppressed 8-byte send,
//! then waits for the other side's send), `N` times between two endpoints
//! of one spec in this process, over real loopback TCP sockets.
//!
//! It is the workload `scripts/rt-instructions.sh` runs under callgrind:
//! the instructions one round trip costs (both ends) on a plain `tcp`
//! endpoint and on multirail endpoints, counted rather than timed, so the
//! multirail layer's own cost per small message can be compared on a
//! noisy host. Run alone it prints the median time of each post.
//!
//! `cargo run --release -p rmr-bench --example rtcost -- SPEC [N]`
//! (SPEC as in rmr's endpoint specs: `tcp:127.0.0.1`,
//! `multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned`).

use rmr_api::conformance::{Buf, Pair, Target, next_dto};
use rmr_api::{Access, DtoFlags, DtoOp};
use std::time::Instant;

fn register() {
    backend_tcp::register();
    multirail::register();
}

/// Median of `v`, in nanoseconds.
fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(spec) = args.next() else {
        eprintln!("usage: rtcost SPEC [ROUND_TRIPS]");
        std::process::exit(2);
    };
    let n: u64 = args.next().map_or(2000, |s| s.parse().expect("ROUND_TRIPS: a number"));
    let t = Target::new("rtcost", register, &spec, &spec);
    let p = Pair::new(&t);
    let rw = Access::ALL;
    let (ra, rb) = (Buf::new(&p.pz_a, 8, rw, 0), Buf::new(&p.pz_b, 8, rw, 0));
    let (sa, sb) = (Buf::new(&p.pz_a, 8, rw, 0), Buf::new(&p.pz_b, 8, rw, 0));
    let (wa, wb) = (Buf::new(&p.pz_a, 64, rw, 0), Buf::new(&p.pz_b, 64, rw, 0));
    let (ctx_a, ctx_b) = (wa.ctx(), wb.ctx());
    let mut took: [Vec<u64>; 3] = Default::default();
    std::thread::scope(|s| {
        p.b.post_recv(&[rb.sge()], 0, DtoFlags::empty()).expect("post_recv");
        s.spawn(|| {
            for i in 0..n {
                let c = next_dto(&p.evd_b);
                assert!(c.status.is_ok() && c.op == DtoOp::Recv, "{c:?}");
                if i + 1 < n {
                    p.b.post_recv(&[rb.sge()], 0, DtoFlags::empty()).expect("post_recv");
                }
                wb.mem.write(0, &i.to_le_bytes()).expect("write");
                sb.mem.write(0, &i.to_le_bytes()).expect("write");
                p.b.post_rdma_write(&[wb.part(0, 8)], &ctx_a, 0, 0, DtoFlags::SUPPRESS)
                    .expect("post_rdma_write");
                p.b.post_send(&[sb.sge()], 0, DtoFlags::SUPPRESS).expect("post_send");
            }
        });
        for i in 0..n {
            let t0 = Instant::now();
            p.a.post_recv(&[ra.sge()], 0, DtoFlags::empty()).expect("post_recv");
            let t1 = Instant::now();
            wa.mem.write(0, &i.to_le_bytes()).expect("write");
            sa.mem.write(0, &i.to_le_bytes()).expect("write");
            let t2 = Instant::now();
            p.a.post_rdma_write(&[wa.part(0, 8)], &ctx_b, 0, 0, DtoFlags::SUPPRESS)
                .expect("post_rdma_write");
            let t3 = Instant::now();
            p.a.post_send(&[sa.sge()], 0, DtoFlags::SUPPRESS).expect("post_send");
            let t4 = Instant::now();
            let c = next_dto(&p.evd_a);
            assert!(c.status.is_ok() && c.op == DtoOp::Recv, "{c:?}");
            assert_eq!(ra.bytes(), i.to_le_bytes(), "answer {i}");
            for (v, d) in took.iter_mut().zip([t1 - t0, t3 - t2, t4 - t3]) {
                v.push(d.as_nanos() as u64);
            }
        }
    });
    let [r, w, snd] = &mut took;
    println!(
        "{spec}: {n} round trips; median post times: receive {} ns, write {} ns, send {} ns",
        median(r),
        median(w),
        median(snd)
    );
}
