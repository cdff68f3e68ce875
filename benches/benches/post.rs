//! Criterion benches of the small-message path over loopback TCP, on a
//! plain `tcp` endpoint and on multirail endpoints of one and two rails:
//! what the caller pays to post a suppressed 8-byte RDMA write, and an
//! 8-byte send/receive ping-pong with a peer thread. The multirail post
//! rows over the `tcp` row are the layer's own cost per small message.
//!
//! Real sockets on 127.0.0.1 and 127.0.0.2, both ends in this process on
//! whatever CPUs the host gives them: the ping-pong rows depend on where
//! the scheduler puts the threads (the lab's latency rows, with one end
//! per CPU, are the measure of record), so compare rows of one run only.
//!
//! `cargo bench -p rmr-bench --bench post`
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{Criterion, criterion_group, criterion_main};
use rmr_api::Cookie;
use rmr_api::provider::conformance::{Buf, Pair, Target, expect_ok, next_dto};
use rmr_api::{Access, DtoFlags};
use std::time::{Duration, Instant};

/// Suppressed posts timed between two waited-for writes (a window's worth
/// stays well inside every endpoint's queue).
const BATCH: u64 = 16;
/// The ping payload that tells the peer thread to stop.
const STOP: u64 = u64::MAX;

const SPECS: [(&str, &str); 4] = [
    ("tcp", "tcp:127.0.0.1"),
    ("multirail 1 rail pinned", "multirail:tcp:127.0.0.1;engine=pinned"),
    ("multirail 2 rails pinned", "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned"),
    ("multirail 2 rails inline", "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=inline"),
];

fn register() {
    backend_tcp::register();
    multirail::register();
}

fn small_messages(c: &mut Criterion) {
    let mut g = c.benchmark_group("small");
    g.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    for (name, spec) in SPECS {
        let t = Target::new("post-bench", register, spec, spec);
        let p = Pair::new(&t);
        let (local, remote) =
            (Buf::new(&p.pz_a, 64, Access::ALL, 1), Buf::new(&p.pz_b, 64, Access::ALL, 0));
        let ctx = remote.ctx();
        let mut cookie = 0u64;
        g.bench_function(format!("suppressed 8 B write post/{name}"), |b| {
            b.iter_custom(|iters| {
                let mut took = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    let k = BATCH.min(iters - done);
                    let t0 = Instant::now();
                    for _ in 0..k {
                        p.a.post_rdma_write(
                            &[local.part(0, 8)],
                            ctx.at(0),
                            Cookie(0),
                            DtoFlags::SUPPRESS,
                        )
                        .unwrap();
                    }
                    took += t0.elapsed();
                    done += k;
                    cookie += 1;
                    p.a.post_rdma_write(
                        &[local.part(0, 8)],
                        ctx.at(0),
                        Cookie(cookie),
                        DtoFlags::empty(),
                    )
                    .unwrap();
                    expect_ok(&p.evd_a, cookie);
                }
                took
            })
        });
        ping_pong(&mut g, name, &p);
    }
    g.finish();
}

/// 8-byte send/receive round trips with a peer thread that answers each.
fn ping_pong(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    p: &Pair,
) {
    let (sa, ra) = (Buf::new(&p.pz_a, 8, Access::ALL, 0), Buf::new(&p.pz_a, 8, Access::ALL, 0));
    let (sb, rb) = (Buf::new(&p.pz_b, 8, Access::ALL, 0), Buf::new(&p.pz_b, 8, Access::ALL, 0));
    std::thread::scope(|s| {
        p.b.post_recv(&[rb.sge()], Cookie(0), DtoFlags::empty()).unwrap();
        s.spawn(|| {
            loop {
                let c = next_dto(&p.evd_b);
                assert!(c.status.is_ok(), "{c:?}");
                if c.cookie != 0 {
                    continue; // a send's own completion
                }
                let v = u64::from_le_bytes(rb.bytes()[..8].try_into().unwrap());
                if v == STOP {
                    return;
                }
                p.b.post_recv(&[rb.sge()], Cookie(0), DtoFlags::empty()).unwrap();
                sb.mem.write(0, &v.to_le_bytes()).unwrap();
                p.b.post_send(&[sb.sge()], Cookie(1), DtoFlags::SUPPRESS).unwrap();
            }
        });
        let mut seq = 0u64;
        let round = |v: u64| {
            p.a.post_recv(&[ra.sge()], Cookie(0), DtoFlags::empty()).unwrap();
            sa.mem.write(0, &v.to_le_bytes()).unwrap();
            p.a.post_send(&[sa.sge()], Cookie(1), DtoFlags::SUPPRESS).unwrap();
            loop {
                let c = next_dto(&p.evd_a);
                assert!(c.status.is_ok(), "{c:?}");
                if c.cookie == 0 {
                    break;
                }
            }
            assert_eq!(ra.bytes()[..8], v.to_le_bytes(), "the answer is the ping");
        };
        g.bench_function(format!("8 B send ping-pong/{name}"), |b| {
            b.iter(|| {
                seq += 1;
                round(seq)
            })
        });
        // The last receive stays posted; the peer stops on this ping.
        sa.mem.write(0, &STOP.to_le_bytes()).unwrap();
        p.a.post_send(&[sa.sge()], Cookie(1), DtoFlags::empty()).unwrap();
        expect_ok(&p.evd_a, 1);
    });
}

criterion_group!(benches, small_messages);
criterion_main!(benches);
