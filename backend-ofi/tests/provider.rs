//! Backend-specific behaviour beyond the conformance suite: clean errors for
//! a provider that is not there, and the EVD's wait fd (`Evd::wait_fd` /
//! `Evd::arm`) used with poll(2), on both providers.

use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, EpEvds, Error, Event, MemRegion, Sge};
use std::time::{Duration, Instant};

fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none() {
            // SAFETY: runs once before any libfabric call reads the variable.
            unsafe { std::env::set_var("FI_SOCKETS_PE_WAITTIME", "0") };
        }
    });
    backend_ofi::register();
}

#[test]
fn missing_provider_is_a_clean_error() {
    setup();
    match rmr_api::open("ofi:no_such_provider:127.0.0.1") {
        Err(Error::NoDevice { what }) => assert!(what.contains("no_such_provider"), "{what}"),
        Err(e) => panic!("expected NoDevice, got {e}"),
        Ok(_) => panic!("a provider that does not exist opened"),
    }
    assert!(matches!(rmr_api::open("ofi:tcp:not-an-ip"), Err(Error::BadSpec { .. })));
}

/// Blocks in poll(2) on the EVD's fd, following the fi_trywait protocol.
fn poll_for_event(evd: &std::sync::Arc<dyn rmr_api::Evd>, within: Duration) -> Event {
    let fd = evd.wait_fd().expect("an EVD with a wait fd");
    let deadline = Instant::now() + within;
    loop {
        if let Some(e) = evd.dequeue() {
            return e;
        }
        assert!(Instant::now() < deadline, "no event through the wait fd");
        if evd.arm() {
            let mut p = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut p, 1, 1000) };
            assert!(n >= 0, "poll failed");
        }
    }
}

fn wait_fd_delivers(spec: &str) {
    setup();
    let ia = rmr_api::open(spec).unwrap();
    let (pz, pevd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let (aevd, bevd) = (ia.create_evd().unwrap(), ia.create_evd().unwrap());
    if aevd.wait_fd().is_none() {
        println!("SKIPPED: {spec}: the provider gives no FI_WAIT_FD wait object");
        return;
    }
    let a = ia.create_ep(&pz, &EpEvds::single(&aevd)).unwrap();
    let b = ia.create_ep(&pz, &EpEvds::single(&bevd)).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    std::thread::scope(|s| {
        let a2 = a.clone();
        let h = s.spawn(move || a2.connect(&addr, svc, b"", Duration::from_secs(10)).unwrap());
        // The connection request itself arrives through the PSP EVD's fd.
        match poll_for_event(&pevd, Duration::from_secs(10)) {
            Event::ConnectionRequest(cr) => cr.accept(&b, b"").unwrap(),
            e => panic!("{e:?}"),
        }
        h.join().unwrap();
    });
    assert!(matches!(poll_for_event(&aevd, Duration::from_secs(10)), Event::Established { .. }));
    assert!(matches!(poll_for_event(&bevd, Duration::from_secs(10)), Event::Established { .. }));
    let src = MemRegion::from_bytes(b"through the fd");
    let dst = MemRegion::new(64);
    let (sl, dl) = (
        pz.register_all(&src, Access::empty()).unwrap(),
        pz.register_all(&dst, Access::LOCAL_WRITE).unwrap(),
    );
    b.post_recv(&[Sge::whole(&*dl)], Cookie(1), DtoFlags::empty()).unwrap();
    // Nothing pending: arm() must allow blocking, and poll must time out.
    assert!(bevd.arm(), "arm() refused with nothing pending");
    let mut p = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&bevd.wait_fd().unwrap()),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    assert_eq!(unsafe { libc::poll(&mut p, 1, 50) }, 0, "idle wait fd is readable");
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            a.post_send(&[Sge::whole(&*sl)], Cookie(2), DtoFlags::SUPPRESS).unwrap();
        });
        match poll_for_event(&bevd, Duration::from_secs(10)) {
            Event::Dto(c) => {
                assert_eq!((c.cookie.0, c.bytes), (1, 14));
                c.result().unwrap();
            }
            e => panic!("{e:?}"),
        }
    });
    assert_eq!(dst.to_vec(0, 14).unwrap(), b"through the fd");
    // A software event makes the fd readable too.
    bevd.post_software(7).unwrap();
    assert!(matches!(poll_for_event(&bevd, Duration::from_secs(5)), Event::Software(7)));
}

#[test]
fn wait_fd_tcp_provider() {
    wait_fd_delivers("ofi:tcp:127.0.0.1");
}

#[test]
fn wait_fd_sockets_provider() {
    wait_fd_delivers("ofi:sockets:127.0.0.1");
}
