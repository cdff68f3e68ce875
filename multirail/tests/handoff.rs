//! With the `pinned` engine, work a rail thread would only delay is posted
//! by the caller while that rail's thread has nothing queued: every whole
//! small DTO, the probe a fence sends, and the notify the fence releases
//! (with a probe beside it, a batch of two), and stripes of at most 64 KiB.
//! Larger stripes go to the rail threads where they have cores of their
//! own (`direct=64K`); on a node without a core to spare for them
//! (`direct=all`, the default there) the caller posts those too. Real TCP
//! rails on loopback.

use rmr_api::Cookie;
use rmr_api::provider::conformance::{
    Buf, Pair, Target, ep_count, ep_note, expect_ok, next_dto, pattern,
};
use rmr_api::{Access, DtoFlags};

const RW: Access = Access::ALL;

fn register() {
    backend_tcp::register();
    multirail::register();
}

fn handed_off(p: &Pair) -> u64 {
    ep_count(&*p.a, "handed_off")
}

/// A 1 MiB write (two 512 KiB stripes) from a pattern, checked on arrival.
fn write_1m(p: &Pair, seed: u64, cookie: u64) {
    let local = Buf::new(&p.pz_a, 1 << 20, RW, 0);
    let remote = Buf::new(&p.pz_b, 1 << 20, RW, 0);
    local.mem.write(0, &pattern(seed, 1 << 20)).unwrap();
    p.a.post_rdma_write(&[local.sge()], remote.ctx().at(0), Cookie(cookie), DtoFlags::empty())
        .unwrap();
    expect_ok(&p.evd_a, cookie);
    assert_eq!(remote.bytes(), local.bytes(), "the 1 MiB write landed whole");
}

#[test]
fn writes_then_notify_never_wake_a_rail_thread() {
    let s = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;policy=even;direct=64K";
    let t = Target::new("multirail-handoff", register, s, s);
    let p = Pair::new(&t);
    const W: u64 = 4096;
    const N: u64 = 20;
    let local = Buf::new(&p.pz_a, 1 << 20, RW, 0);
    let remote = Buf::new(&p.pz_b, 1 << 20, RW, 0);
    let (sbuf, rbuf) = (Buf::new(&p.pz_a, 64, RW, 0), Buf::new(&p.pz_b, 64, RW, 0));
    // rmr-bench's bandwidth pattern: 20 suppressed 4 KiB writes (spread over
    // both rails, each a whole DTO) and a suppressed notify fenced behind
    // them. The notify goes silent on the control rail, so the next fence
    // probes that rail too: the notify it releases has a probe beside it.
    for round in 0..200u64 {
        local.mem.write(0, &pattern(round, (N * W) as usize)).unwrap();
        p.b.post_recv(&[rbuf.sge()], Cookie(round), DtoFlags::empty()).unwrap();
        for i in 0..N {
            let l = local.part(i * W, W);
            p.a.post_rdma_write(&[l], remote.ctx().at(i * W), Cookie(0), DtoFlags::SUPPRESS)
                .unwrap();
        }
        sbuf.mem.write(0, &round.to_le_bytes()).unwrap();
        p.a.post_send(&[sbuf.sge()], Cookie(round), DtoFlags::SUPPRESS).unwrap();
        let c = next_dto(&p.evd_b);
        assert!(c.status.is_ok() && c.cookie == round, "{c:?}");
        // The notify's receive sees every write posted before it.
        assert_eq!(remote.bytes()[..(N * W) as usize], local.bytes()[..(N * W) as usize]);
    }
    assert_eq!(handed_off(&p), 0, "small work went through a rail thread");
    let probes = ep_count(&*p.a, "probes");
    println!("probes: {probes}");
    // A 64 KiB write is striped (2 x 32 KiB) and its stripes posted by the
    // caller; the rails' threads are idle.
    p.a.post_rdma_write(
        &[local.part(0, 64 << 10)],
        remote.ctx().at(0),
        Cookie(6),
        DtoFlags::empty(),
    )
    .unwrap();
    expect_ok(&p.evd_a, 6);
    assert_eq!(handed_off(&p), 0, "a 64 KiB write's stripes went through the rail threads");
    // A 1 MiB write's stripes (2 x 512 KiB) go to the rail threads, which
    // copy them into both rails at once.
    p.a.post_rdma_write(&[local.sge()], remote.ctx().at(0), Cookie(7), DtoFlags::empty()).unwrap();
    expect_ok(&p.evd_a, 7);
    assert!(handed_off(&p) >= 2, "the stripes were not handed to the rail threads");
}

/// `direct=all`: the caller posts a 1 MiB write's two 512 KiB stripes
/// itself while the rails' threads are idle; nothing is handed off.
#[test]
fn direct_all_posts_large_stripes_from_the_caller() {
    let s = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;policy=even;direct=all";
    let p = Pair::new(&Target::new("multirail-direct-all", register, s, s));
    assert_eq!(ep_note(&*p.a, "direct_max"), "all");
    for i in 0..4 {
        write_1m(&p, i, i);
    }
    assert_eq!(handed_off(&p), 0, "a stripe went through a rail thread");
}

/// Without `direct=`, the caller keeps the large stripes exactly when the
/// node has no core for each rail thread beside its own; `direct=` takes a
/// size, `all` or `auto`, and rejects anything else.
#[test]
fn direct_default_follows_the_cores() {
    let s = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned";
    let p = Pair::new(&Target::new("multirail-direct-auto", register, s, s));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let want = if cores > 2 { (64u64 << 10).to_string() } else { "all".into() };
    assert_eq!(ep_note(&*p.a, "direct_max"), want, "{cores} cores, 2 rails");
    write_1m(&p, 9, 9);
    let handed = handed_off(&p);
    if cores > 2 {
        assert!(handed >= 2, "{cores} cores: the stripes stayed with the caller");
    } else {
        assert_eq!(handed, 0, "{cores} cores: a stripe went to a rail thread");
    }
    println!("{cores} cores: direct_max {want}, {handed} handed off");
    register();
    for (opt, ok) in [("direct=128K", true), ("direct=auto", true), ("direct=most", false)] {
        let r = rmr_api::open(&format!("multirail:tcp:127.0.0.1;{opt}"));
        assert_eq!(r.is_ok(), ok, "{opt}: {:?}", r.err());
    }
}
