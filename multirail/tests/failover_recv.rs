//! Receives survive the loss of the rail they were posted on. Rail 0 (the
//! control rail, where receives are posted) runs through a proxy that the
//! test cuts: the rail ends at once on both sides (the peer closed). The
//! receives it held come back flushed from that rail, often before the
//! rail's own end is handled; they must be posted again on the survivor and
//! take the sends that follow, never reach the user as `Flushed` while the
//! endpoint lives. (The chaos soak found this over shaped lab rails.)

use rmr_api::provider::conformance::checksum;
use rmr_api::{Access, Cookie, DtoFlags, EpEvds, EpState, Evd, Event, MemRegion, Sge};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/proxy.rs"]
mod proxy;
use proxy::Proxy;

const WAIT: Duration = Duration::from_secs(20);

fn next_event(evd: &Arc<dyn Evd>, until: Instant) -> Option<Event> {
    let left = until.saturating_duration_since(Instant::now());
    evd.wait(Some(left), 1).ok()
}

fn run(engine: &str, net: u8, service: u16) {
    backend_tcp::register();
    multirail::register();
    let ip = |h: u8| format!("127.0.{net}.{h}");
    let open = |a: u8, b: u8| {
        rmr_api::open(&format!("multirail:tcp:{},tcp:{};engine={engine}", ip(a), ip(b))).unwrap()
    };
    // Server rails .1 and .2; the client's .4 and .5, its rail 0 through
    // the proxy at .3.
    let (ia_b, ia_a) = (open(1, 2), open(4, 5));
    let proxy = Proxy::start(&format!("{}:{service}", ip(3)), &format!("{}:{service}", ip(1)));
    let (pz_b, evd_b, pevd) =
        (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let _psp = ia_b.create_psp(service, &pevd).unwrap();
    let ep_b = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
    let inbox = MemRegion::new(64 * 8);
    let il = pz_b.register_all(&inbox, Access::LOCAL_WRITE).unwrap();
    let (pz_a, evd_a) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep_a = ia_a.create_ep(&pz_a, &EpEvds::single(&evd_a)).unwrap();
    let (eb, pe) = (ep_b.clone(), pevd.clone());
    let server = std::thread::spawn(move || match pe.wait(Some(WAIT), 1).unwrap() {
        Event::ConnectionRequest(cr) => cr.accept(&eb, b"").unwrap(),
        e => panic!("{e:?}"),
    });
    ep_a.connect(&format!("{},{}", ip(3), ip(2)), service, b"", WAIT).unwrap();
    server.join().unwrap();
    for i in 0..8 {
        ep_b.post_recv(&[Sge::new(&*il, 64 * i, 64)], Cookie(i), DtoFlags::empty()).unwrap();
    }
    let src = MemRegion::new(64 * 8);
    for i in 0..8u64 {
        src.write(64 * i, &rmr_api::provider::conformance::pattern(i + 1, 64)).unwrap();
    }
    let sl = pz_a.register_all(&src, Access::empty()).unwrap();
    let send = |i: u64| {
        ep_a.post_send(&[Sge::new(&*sl, 64 * i, 64)], Cookie(i), DtoFlags::empty()).unwrap();
        let until = Instant::now() + WAIT;
        loop {
            match next_event(&evd_a, until).expect("the send's completion") {
                Event::Dto(c) if c.cookie.0 == i => {
                    assert!(c.status.is_ok(), "{engine}: send {i}: {c:?}");
                    return;
                }
                e => println!("client: {e:?}"),
            }
        }
    };
    // The server waits for its receives all along, as an application does
    // (under the inline engine, its waits are what harvest its rails).
    let (eb, eng) = (ep_b.clone(), engine.to_string());
    let server = std::thread::spawn(move || {
        let mut got = Vec::new();
        let until = Instant::now() + WAIT;
        while got.len() < 5 {
            match next_event(&evd_b, until).expect("a receive") {
                Event::Dto(c) => {
                    assert!(
                        c.status.is_ok(),
                        "{eng}: a receive reached the user as {:?} while the EP is {:?}",
                        c.status,
                        eb.state()
                    );
                    got.push(c.cookie.0);
                }
                e => println!("server: {e:?}"),
            }
        }
        got
    });
    send(0);
    std::thread::sleep(Duration::from_millis(100));
    proxy.cut();
    // Both sides lose rail 0 (the peer closed); the endpoints go on.
    std::thread::sleep(Duration::from_millis(300));
    for i in 1..5 {
        send(i);
    }
    let got = server.join().unwrap();
    assert_eq!(ep_b.state(), EpState::Connected, "{engine}");
    for (k, &cookie) in got.iter().enumerate() {
        let want = checksum(&rmr_api::provider::conformance::pattern(k as u64 + 1, 64));
        assert_eq!(
            checksum(&inbox.to_vec(64 * cookie, 64).unwrap()),
            want,
            "{engine}: message {k} in receive {cookie}"
        );
    }
    println!("{engine}: receives {got:?} after the cut, all intact");
}

#[test]
fn receives_survive_the_loss_of_their_rail_inline() {
    run("inline", 71, 7671);
}

#[test]
fn receives_survive_the_loss_of_their_rail_pinned() {
    run("pinned", 72, 7672);
}
