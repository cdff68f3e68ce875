//! Criterion benches of the hot paths that need no network: the multirail
//! planner, event queue push/pop, the TCP frame codec, and registered
//! memory's copying accessors beside a plain `memcpy` of the same bytes.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use backend_tcp::wire::{HDR, Header, Op, decode_data};
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use multirail::{Planner, Policy};
use rmr_api::provider::SoftEvd;
use rmr_api::{Evd, Event};

fn planner(c: &mut Criterion) {
    let mut even = Planner::new(2, Policy::Even, 8 << 10, 4096);
    c.bench_function("planner/even/2 rails/1MiB", |b| {
        b.iter(|| black_box(even.plan(black_box(1 << 20))))
    });
    let mut small = Planner::new(4, Policy::Even, 8 << 10, 4096);
    c.bench_function("planner/below threshold/4 rails", |b| {
        b.iter(|| black_box(small.plan(black_box(512))))
    });
    let mut ad = Planner::new(4, Policy::parse("adaptive").unwrap(), 8 << 10, 4096);
    c.bench_function("planner/adaptive/4 rails/plan+feedback", |b| {
        b.iter(|| {
            let s = ad.plan(black_box(4 << 20));
            let t: Vec<(usize, f64)> =
                s.iter().map(|x| (x.rail, x.len as f64 * 1e-9 * (x.rail + 1) as f64)).collect();
            ad.feedback(&t);
        })
    });
}

fn evd(c: &mut Criterion) {
    let e = SoftEvd::new(1 << 20);
    c.bench_function("evd/push+dequeue", |b| {
        b.iter(|| {
            e.push(Event::Software(black_box(7)));
            black_box(e.dequeue())
        })
    });
}

fn codec(c: &mut Criterion) {
    let mut h = Header::new(Op::Write);
    h.seq = 42;
    h.ack = 41;
    h.key = 0xdead_beef;
    h.addr = 0x1000;
    h.len = 65536;
    c.bench_function("wire/encode", |b| {
        b.iter(|| {
            let mut out = [0u8; HDR];
            let mut last = 0;
            black_box(black_box(&h).encode_data(&mut last, &mut out));
            black_box(out)
        })
    });
    let mut bytes = [0u8; HDR];
    let n = h.encode_data(&mut 0, &mut bytes);
    c.bench_function("wire/decode+validate", |b| {
        b.iter(|| {
            let mut last = 0;
            let d = decode_data(black_box(&bytes[..n]), 42, &mut last);
            black_box(d.ok().flatten().map(|(h, _)| h.validate()))
        })
    });
}

/// `MemRegion::read`/`write` (atomic word by word, long runs in machine
/// code) beside `copy_from_slice` between two vectors (`memcpy`), each at a
/// 16-byte aligned offset and 8 bytes past one, from 8 bytes to 1 MiB.
fn memory(c: &mut Criterion) {
    let r = rmr_api::MemRegion::new(2 << 20);
    let (mut a, b) = (vec![0u8; 2 << 20], vec![1u8; 2 << 20]);
    for n in [8usize, 64, 512, 4000, 1 << 20] {
        for off in [0usize, 8] {
            c.bench_function(&format!("memory/read/{n}B/+{off}"), |bn| {
                bn.iter(|| r.read(black_box(off as u64), &mut a[..n]).unwrap())
            });
            c.bench_function(&format!("memory/write/{n}B/+{off}"), |bn| {
                bn.iter(|| r.write(black_box(off as u64), &b[..n]).unwrap())
            });
            c.bench_function(&format!("memory/memcpy/{n}B/+{off}"), |bn| {
                bn.iter(|| a[..n].copy_from_slice(black_box(&b[off..off + n])))
            });
        }
    }
}

criterion_group!(benches, planner, evd, codec, memory);
criterion_main!(benches);
