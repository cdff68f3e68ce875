//! A multirail IA opens its rails as shares of one ([`rmr_api::provider::with_rail_share`]):
//! each tcp rail to a near peer takes its share of the near send buffer
//! (512 KiB / 2 for two rails), so the rails' buffers together stay the
//! size one connection alone would get. Real tcp rails on loopback.

use rmr_api::provider::conformance::{Pair, Target, ep_note};

fn register() {
    backend_tcp::register();
    multirail::register();
}

#[test]
fn each_of_two_tcp_rails_gets_half_the_near_send_buffer() {
    let s = "multirail:tcp:127.0.0.1,tcp:127.0.0.2";
    let t = Target::new("multirail-rail-share", register, s, s);
    let p = Pair::new(&t);
    for ep in [&p.a, &p.b] {
        let mr = ep.as_any().downcast_ref::<multirail::MrEp>().expect("a multirail EP");
        for i in 0..2 {
            let n = ep_note(&*mr.rail_ep(i).expect("rail"), "sndbuf");
            assert!(
                n.ends_with(" (262144 asked; near: the peer is on this host)"),
                "rail {i}: {n}"
            );
        }
    }
    // The share held only while the rails opened.
    assert_eq!(rmr_api::provider::rail_share(), 1);
}
