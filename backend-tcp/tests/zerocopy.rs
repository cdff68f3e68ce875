//! Zero-copy sends (`zerocopy`, `RMR_TCP_ZEROCOPY`): the whole conformance
//! suite with every request payload sent with `MSG_ZEROCOPY`; a large
//! write arrives whole, completes only once the kernel is done with its
//! pages (the EP's `zerocopy` note counts the kernel's notices, none left
//! waiting), and its memory is the user's again at its completion; the
//! knob parses, and is off by default.

use backend_tcp::TcpConfig;
use rmr_api::provider::conformance::{Buf, Pair, Target, ep_note, next_dto};
use rmr_api::{Access, Cookie, DtoFlags};

fn target() -> Target {
    Target::new(
        "tcp-zerocopy",
        backend_tcp::register,
        "tcp:127.0.0.1;zerocopy=1",
        "tcp:127.0.0.1;zerocopy=1",
    )
}

mod conformance {
    rmr_api::provider::conformance_suite!(super::target);
}

/// The numbers of the note "on (payloads >= M B): S sends, C copied by
/// the kernel, R copied for want of room, W waiting".
fn counts(note: &str) -> Vec<u64> {
    note.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect()
}

#[test]
fn a_large_write_goes_zero_copy_and_its_memory_is_free_at_completion() {
    let spec = "tcp:127.0.0.1;zerocopy=64K";
    let p = Pair::new(&Target::new("tcp-zerocopy", backend_tcp::register, spec, spec));
    let len = 4 << 20;
    let src = Buf::new(&p.pz_a, len, Access::empty(), 0);
    let first: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    src.mem.write(0, &first).unwrap();
    let dst = [0, 1].map(|_| Buf::new(&p.pz_b, len, Access::REMOTE_WRITE, 0));
    p.a.post_rdma_write(&[src.sge()], dst[0].ctx().at(0), Cookie(1), DtoFlags::empty()).unwrap();
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie, Cookie(1));
    assert!(c.status.is_ok(), "{c:?}");
    let n = ep_note(&*p.a, "zerocopy");
    let k = counts(&n);
    assert_eq!(k.len(), 5, "{n}");
    assert_eq!(k[0], 64 << 10, "{n}");
    if k[1] == 0 {
        // Refused each time (as a user with a small locked-memory limit):
        // the write went copied, and the note says so.
        assert!(k[3] >= 1, "neither zero-copy nor refused: {n}");
        println!("the kernel refused every zero-copy send (RLIMIT_MEMLOCK?): {n}");
    } else {
        // Over loopback the kernel copies at delivery, and says so.
        assert!(k[2] >= 1, "{n}");
    }
    assert_eq!(k[4], 0, "the write completed before the kernel was done with its pages: {n}");
    // Its memory is the user's again: new bytes there go with the next
    // write only. (Over loopback the kernel has copied the bytes by the
    // time the peer acknowledges them, so this holds the semantics, not
    // the gate: the count of calls waiting above does that.)
    let second: Vec<u8> = first.iter().map(|b| b ^ 0xa5).collect();
    src.mem.write(0, &second).unwrap();
    p.a.post_rdma_write(&[src.sge()], dst[1].ctx().at(0), Cookie(2), DtoFlags::empty()).unwrap();
    let c = next_dto(&p.evd_a);
    assert_eq!(c.cookie, Cookie(2));
    assert!(c.status.is_ok(), "{c:?}");
    let mut got = vec![0u8; len];
    dst[0].mem.read(0, &mut got).unwrap();
    assert!(got == first, "the first write arrived changed");
    dst[1].mem.read(0, &mut got).unwrap();
    assert!(got == second, "the second write arrived changed");
    // Small DTOs and the peer's copies stay as they were.
    assert!(ep_note(&*p.b, "zerocopy").contains(" 0 sends"), "{}", ep_note(&*p.b, "zerocopy"));
}

#[test]
fn the_knob_parses_is_off_by_default_and_a_bad_value_is_refused() {
    let parse = |v: &str| {
        let (_, g) = rmr_api::settings::Given::split(
            "tcp",
            &format!("127.0.0.1;zerocopy={v}"),
            &backend_tcp::KNOBS,
        )
        .unwrap();
        TcpConfig::from_given(&g)
    };
    assert_eq!(parse("64K").unwrap().zerocopy, Some(64 << 10));
    assert_eq!(parse("off").unwrap().zerocopy, None);
    assert_eq!(parse("0").unwrap().zerocopy, None);
    assert_eq!(TcpConfig::default().zerocopy, None);
    for bad in ["big", "2T"] {
        let e = parse(bad).unwrap_err();
        assert!(e.to_string().contains("zerocopy"), "{bad}: {e}");
    }
    let spec = "tcp:127.0.0.1";
    let p = Pair::new(&Target::new("tcp-zerocopy", backend_tcp::register, spec, spec));
    assert_eq!(ep_note(&*p.a, "zerocopy"), "off");
}
