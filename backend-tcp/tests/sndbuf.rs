//! The send buffer of a connection to a near peer (`near_sndbuf`): over
//! loopback (a peer on this host) both ends set it to the knob's value
//! instead of the kernel's autotuning, `near=off` and `near_sndbuf=0`
//! leave the kernel's, an explicit `sockbuf` wins, and the EP's `sndbuf`
//! note says what the socket got and why. A large write still arrives
//! whole through the small buffer. Explicit values are never divided
//! among rails.

use backend_tcp::TcpConfig;
use rmr_api::provider::conformance::{Buf, Pair, Target, ep_note, next_dto};
use rmr_api::{Access, Cookie, DtoFlags};

fn pair(spec: &str) -> Pair {
    Pair::new(&Target::new("tcp-sndbuf", backend_tcp::register, spec, spec))
}

#[test]
fn a_near_peer_gets_the_small_send_buffer_and_a_large_write_arrives_whole() {
    let p = pair("tcp:127.0.0.1");
    for ep in [&p.a, &p.b] {
        let n = ep_note(&**ep, "sndbuf");
        let (got, why) = n.split_once(' ').expect("size and reason");
        // The kernel doubles what it is asked for, up to net.core.wmem_max.
        let got: usize = got.parse().unwrap_or_else(|_| panic!("{n}"));
        assert!(got > 0 && got <= 2 * (512 << 10), "{n}");
        assert_eq!(why, "(524288 asked; near: the peer is on this host)");
    }
    // 4 MiB through a 512 KiB buffer: every byte lands, in place.
    let len = 4 << 20;
    let src = Buf::new(&p.pz_a, len, Access::empty(), 0);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    src.mem.write(0, &pattern).unwrap();
    let dst = Buf::new(&p.pz_b, len, Access::REMOTE_WRITE, 0);
    p.a.post_rdma_write(&[src.sge()], dst.ctx().at(0), Cookie(9), DtoFlags::URGENT).unwrap();
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie, Cookie(9));
    assert!(c.status.is_ok(), "{c:?}");
    let mut got = vec![0u8; len];
    dst.mem.read(0, &mut got).unwrap();
    assert!(got == pattern, "the 4 MiB write arrived changed");
}

#[test]
fn near_off_or_zero_leaves_autotuning_and_sockbuf_wins() {
    for spec in ["tcp:127.0.0.1;near_sndbuf=0", "tcp:127.0.0.1;near=off"] {
        let p = pair(spec);
        for ep in [&p.a, &p.b] {
            assert_eq!(ep_note(&**ep, "sndbuf"), "kernel autotuning (near off)", "{spec}");
        }
    }
    let p = pair("tcp:127.0.0.1;sockbuf=1M;near=rtt");
    for ep in [&p.a, &p.b] {
        assert_eq!(ep_note(&**ep, "sndbuf"), "1048576 asked (sockbuf)");
    }
}

#[test]
fn the_knob_parses_from_a_spec_and_a_bad_value_is_refused() {
    let (_, g) =
        rmr_api::settings::Given::split("tcp", "127.0.0.1;near_sndbuf=256K", &backend_tcp::KNOBS)
            .unwrap();
    assert_eq!(TcpConfig::from_given(&g).unwrap().near_sndbuf, 256 << 10);
    let (_, g) =
        rmr_api::settings::Given::split("tcp", "127.0.0.1;near_sndbuf=big", &backend_tcp::KNOBS)
            .unwrap();
    let e = TcpConfig::from_given(&g).unwrap_err();
    assert!(e.to_string().contains("near_sndbuf"), "{e}");
    for (spec, what) in [("near_sndbuf=1", "near_sndbuf"), ("near=lan", "near")] {
        let (_, g) = rmr_api::settings::Given::split(
            "tcp",
            &format!("127.0.0.1;{spec}"),
            &backend_tcp::KNOBS,
        )
        .unwrap();
        let e = TcpConfig::from_given(&g).unwrap_err();
        assert!(e.to_string().contains(what), "{spec}: {e}");
    }
}

#[test]
fn one_of_n_rails_gets_its_share_by_default_and_an_explicit_size_whole() {
    use rmr_api::provider::with_rail_share;
    let given = |opts: &str| {
        rmr_api::settings::Given::split("tcp", &format!("127.0.0.1{opts}"), &backend_tcp::KNOBS)
            .unwrap()
            .1
    };
    let near = |share: usize, opts: &str| {
        with_rail_share(share, || TcpConfig::from_given(&given(opts)).unwrap().near_sndbuf)
    };
    assert_eq!(near(1, ""), 512 << 10);
    assert_eq!(near(2, ""), 256 << 10);
    assert_eq!(near(8, ""), 128 << 10, "never below 128 KiB");
    assert_eq!(near(4, ";near_sndbuf=512K"), 512 << 10, "an explicit size is not divided");
    assert_eq!(TcpConfig::from_given(&given("")).unwrap().near, backend_tcp::Near::Host);
}
