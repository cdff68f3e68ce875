//! CQs on a poll set (`FI_WAIT_POLLFD`, the `tcp` provider's default): a
//! thread that sleeps on the mirror of the set must wake for a connection
//! whose socket joined the set after it fell asleep. The server endpoint's
//! completions all go to one EVD (one CQ: no other CQ's progress pass
//! reads its socket) and its connection events to another, so nothing but
//! the data (and the backend's wake-up when the connection came up) can
//! wake the thread that waits on it, asleep before the client connects.

mod support;

use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, Sge};
use std::time::{Duration, Instant};

#[test]
fn a_waiter_asleep_before_a_connection_gets_its_first_message() {
    backend_ofi::register();
    for prov in ["tcp", "sockets"] {
        joined_while_asleep(prov);
    }
}

#[test]
fn the_setting_and_the_provider_choose_what_cqs_wait_on() {
    backend_ofi::register();
    let (major, minor) = backend_ofi::libfabric_version();
    let tcp_default = if (major, minor) < (1, 18) { "poll set" } else { "fd" };
    for (spec, want) in [
        ("ofi:tcp:127.0.0.1", tcp_default),
        ("ofi:tcp:127.0.0.1;poll_set=0", "fd"),
        // The sockets provider has no poll set: the fd, whatever is asked.
        ("ofi:sockets:127.0.0.1", "fd"),
        ("ofi:sockets:127.0.0.1;poll_set=1", "fd"),
    ] {
        let ia = rmr_api::open(spec).unwrap();
        let (pz, evd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
        let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
        assert_eq!(ep.attr().note("ofi.cq_wait"), Some(want), "{spec}");
    }
}

#[test]
fn a_poll_set_carries_sixteen_endpoints_and_the_next_go_to_an_fd() {
    backend_ofi::register();
    if backend_ofi::libfabric_version() >= (1, 18) {
        eprintln!("skipped: libfabric >= 1.18 has no poll-set CQs here");
        return;
    }
    let spec = "ofi:tcp:127.0.0.1;poll_set=1";
    let (server, client) = (rmr_api::open(spec).unwrap(), rmr_api::open(spec).unwrap());
    let (spz, cpz) = (server.create_pz().unwrap(), client.create_pz().unwrap());
    let (pevd, sevd, cevd) =
        (server.create_evd().unwrap(), server.create_evd().unwrap(), client.create_evd().unwrap());
    let psp = server.create_psp(0, &pevd).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..18 {
        let a = client.create_ep(&cpz, &EpEvds::single(&cevd)).unwrap();
        let b = server.create_ep(&spz, &EpEvds::single(&sevd)).unwrap();
        support::join(&a, &b, &psp, &pevd);
        pairs.push((a, b));
    }
    for _ in 0..18 {
        support::established(&[&sevd, &cevd]);
    }
    let notes: Vec<_> =
        pairs.iter().map(|(_, b)| b.attr().note("ofi.cq_wait").unwrap().to_string()).collect();
    assert!(notes[..16].iter().all(|n| n == "poll set"), "{notes:?}");
    assert!(notes[16..].iter().all(|n| n == "fd"), "{notes:?}");
    // Both CQs of the one EVD deliver: a message on the first and the last pair.
    let dst = MemRegion::new(64);
    let dl = spz.register_all(&dst, Access::LOCAL_WRITE).unwrap();
    let src = MemRegion::from_bytes(b"hello");
    let sl = cpz.register_all(&src, Access::empty()).unwrap();
    for i in [0, 17] {
        let (a, b) = &pairs[i];
        b.post_recv(&[Sge::whole(&*dl)], Cookie(i as u64), DtoFlags::empty()).unwrap();
        a.post_send(&[Sge::whole(&*sl)], Cookie(100), DtoFlags::SUPPRESS).unwrap();
        match sevd.wait(Some(Duration::from_secs(10)), 1) {
            Ok(Event::Dto(c)) => {
                assert_eq!(c.cookie, Cookie(i as u64));
                c.result().unwrap();
                assert_eq!(c.bytes, 5);
            }
            other => panic!("pair {i}: {other:?}"),
        }
    }
}

#[test]
fn a_waiter_drives_a_cq_its_evd_opened_while_it_waited() {
    backend_ofi::register();
    if backend_ofi::libfabric_version() >= (1, 18) {
        eprintln!("skipped: libfabric >= 1.18 has no poll-set CQs here");
        return;
    }
    // No progress threads on the server: only the waiter reads its CQs.
    let server = rmr_api::open("ofi:tcp:127.0.0.1;poll_set=1;progress_thread=0").unwrap();
    let client = rmr_api::open("ofi:tcp:127.0.0.1;poll_set=1").unwrap();
    let (spz, cpz) = (server.create_pz().unwrap(), client.create_pz().unwrap());
    let (pevd, rx, conn, cevd) = (
        server.create_evd().unwrap(),
        server.create_evd().unwrap(),
        server.create_evd().unwrap(),
        client.create_evd().unwrap(),
    );
    let psp = server.create_psp(0, &pevd).unwrap();
    let evds = EpEvds { request: rx.clone(), recv: rx.clone(), conn: conn.clone() };
    let dst = MemRegion::new(64);
    let dl = spz.register_all(&dst, Access::LOCAL_WRITE).unwrap();
    let src = MemRegion::from_bytes(b"seventeenth");
    let sl = cpz.register_all(&src, Access::empty()).unwrap();
    let connect = |b: &std::sync::Arc<dyn rmr_api::Ep>| {
        let a = client.create_ep(&cpz, &EpEvds::single(&cevd)).unwrap();
        support::join(&a, b, &psp, &pevd);
        a
    };
    // Sixteen endpoints fill the poll-set CQ.
    let mut pairs = Vec::new();
    for _ in 0..16 {
        let b = server.create_ep(&spz, &evds).unwrap();
        pairs.push((connect(&b), b));
    }
    std::thread::scope(|s| {
        // Asleep on the receive EVD, over its one CQ, before the next
        // endpoint makes the EVD open a second.
        let waiter = s.spawn(|| rx.wait(Some(Duration::from_secs(20)), 1));
        std::thread::sleep(Duration::from_millis(200));
        let b = server.create_ep(&spz, &evds).unwrap();
        b.post_recv(&[Sge::whole(&*dl)], Cookie(17), DtoFlags::empty()).unwrap();
        let a = connect(&b);
        assert_eq!(b.attr().note("ofi.cq_wait"), Some("fd"), "the EVD's second CQ");
        let sent = Instant::now();
        a.post_send(&[Sge::whole(&*sl)], Cookie(1), DtoFlags::SUPPRESS).unwrap();
        match waiter.join().unwrap() {
            Ok(Event::Dto(c)) => {
                assert_eq!(c.cookie, Cookie(17));
                c.result().unwrap();
                assert_eq!(c.bytes, 11);
            }
            other => panic!("the waiter never read the EVD's new CQ: {other:?}"),
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "the message reached the waiter only at its deadline"
        );
        pairs.push((a, b));
    });
    // The server's endpoints leave first: their goodbyes complete through
    // the client's progress threads (the server has none, and a client's
    // goodbye would wait out its timeout for the server's acknowledgement).
    for (a, b) in pairs {
        drop(b);
        drop(a);
    }
}

fn joined_while_asleep(prov: &str) {
    let spec = format!("ofi:{prov}:127.0.0.1;poll_set=1");
    let (server, client) = (rmr_api::open(&spec).unwrap(), rmr_api::open(&spec).unwrap());
    let (spz, cpz) = (server.create_pz().unwrap(), client.create_pz().unwrap());
    let (pevd, rx, conn) =
        (server.create_evd().unwrap(), server.create_evd().unwrap(), server.create_evd().unwrap());
    // One CQ carries the endpoint: no other CQ's progress pass reads its socket.
    let evds = EpEvds { request: rx.clone(), recv: rx.clone(), conn: conn.clone() };
    let b = server.create_ep(&spz, &evds).unwrap();
    let cevd = client.create_evd().unwrap();
    let a = client.create_ep(&cpz, &EpEvds::single(&cevd)).unwrap();
    let psp = server.create_psp(0, &pevd).unwrap();
    let dst = MemRegion::new(64);
    let dl = spz.register_all(&dst, Access::LOCAL_WRITE).unwrap();
    b.post_recv(&[Sge::whole(&*dl)], Cookie(7), DtoFlags::empty()).unwrap();
    let src = MemRegion::from_bytes(b"first words");
    let sl = cpz.register_all(&src, Access::empty()).unwrap();

    std::thread::scope(|s| {
        // The waiter: asleep on the receive EVD long before the connection.
        let waiter = s.spawn(|| {
            let started = Instant::now();
            let ev = rx.wait(Some(Duration::from_secs(20)), 1);
            (ev, started.elapsed(), cpu_time())
        });
        std::thread::sleep(Duration::from_millis(300));
        support::join(&a, &b, &psp, &pevd);
        support::established(&[&conn]);
        if prov == "tcp" && backend_ofi::libfabric_version() < (1, 18) {
            assert_eq!(
                b.attr().note("ofi.cq_wait"),
                Some("poll set"),
                "tcp's CQs wait on a poll set"
            );
        }
        let sent_at = Instant::now();
        a.post_send(&[Sge::whole(&*sl)], Cookie(1), DtoFlags::empty()).unwrap();
        let (ev, waited, cpu) = waiter.join().unwrap();
        // Asleep, not spinning: the poll set's own signal (raised by every
        // change to the set, cleared only by a wait inside libfabric) is
        // not slept on, and the waiter's spin is microseconds long.
        assert!(
            cpu < waited / 4,
            "{prov}: the waiter used {cpu:?} of CPU in a wait of {waited:?}: it did not sleep"
        );
        match ev {
            Ok(Event::Dto(c)) => {
                assert_eq!(c.cookie, Cookie(7));
                c.result().unwrap();
                assert_eq!(c.bytes, 11);
            }
            other => panic!(
                "{prov}: the first message of a connection made while the waiter slept \
                 never woke it ({other:?} after {waited:?}, {:?} after the send)",
                sent_at.elapsed()
            ),
        }
        // Its wait ends at the latest with a last look at the deadline
        // (20 s): a waiter that slept through the message gets it only then.
        assert!(
            sent_at.elapsed() < Duration::from_secs(5),
            "{prov}: the message woke the waiter only at its deadline ({waited:?})"
        );
        let mut got = [0u8; 11];
        dst.read(0, &mut got).unwrap();
        assert_eq!(&got, b"first words");
    });
}

/// CPU time the calling thread has used.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
