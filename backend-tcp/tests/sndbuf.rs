//! The send buffer of a connection to a near peer (`near_sndbuf`): over
//! loopback (a round trip of microseconds) both ends set it to the knob's
//! value instead of the kernel's autotuning, `near_sndbuf=0` leaves the
//! kernel's, an explicit `sockbuf` wins, and the EP's `sndbuf` note says
//! which and why. A large write still arrives whole through the small
//! buffer.

use backend_tcp::TcpConfig;
use rmr_api::provider::conformance::{Buf, Pair, Target, next_dto};
use rmr_api::{Access, Cookie, DtoFlags, Ep};

fn pair(spec: &str) -> Pair {
    Pair::new(&Target::new("tcp-sndbuf", backend_tcp::register, spec, spec))
}

fn note(ep: &dyn Ep) -> String {
    let notes = ep.attr().notes;
    notes.into_iter().find(|(k, _)| k == "sndbuf").map(|(_, v)| v).expect("an sndbuf note")
}

#[test]
fn a_near_peer_gets_the_small_send_buffer_and_a_large_write_arrives_whole() {
    let p = pair("tcp:127.0.0.1");
    for ep in [&p.a, &p.b] {
        let n = note(&**ep);
        assert!(n.starts_with("524288 (near: round trip "), "{n}");
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
fn near_sndbuf_zero_leaves_autotuning_and_sockbuf_wins() {
    let p = pair("tcp:127.0.0.1;near_sndbuf=0");
    for ep in [&p.a, &p.b] {
        assert_eq!(note(&**ep), "kernel autotuning (near_sndbuf 0)");
    }
    let p = pair("tcp:127.0.0.1;sockbuf=1M");
    for ep in [&p.a, &p.b] {
        assert_eq!(note(&**ep), "1048576 (sockbuf)");
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
}
