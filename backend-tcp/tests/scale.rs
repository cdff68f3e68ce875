//! Many connections: 512 connected EP pairs in one process (a child, so
//! that libtest's own threads do not count) cost at most the IAs' helper
//! and listener threads, and every one of them carries data.

use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, EpState, Event, MemRegion, RmrContext, Sge};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROLE: &str = "RMR_TEST_SCALE_CHILD";

/// The tests here count the process's threads and open hundreds of
/// sockets each: they run one at a time (another's threads would be
/// counted, and together they would pass the open-file limit).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
const PAIRS: usize = 512;
const CONNECTORS: usize = 8;

/// The process's threads named by rmr (`rmr-…`): libtest's own come
/// and go as it starts tests.
fn rmr_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|n| n.starts_with("rmr-"))
                })
                .count()
        })
        .unwrap_or(0)
}

fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Raises the open-file limit as far as the hard limit allows; the test
/// needs two sockets per pair and some room.
fn raise_nofile(need: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    let hard = l.maximum.unwrap_or(u64::MAX);
    l.current = Some(hard.min(need.max(l.current.unwrap_or(0))));
    setrlimit(Resource::Nofile, l).expect("raise the open-file limit");
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(now >= need, "{need} descriptors needed, the hard limit allows {hard}");
}

fn child() {
    raise_nofile(2 * PAIRS as u64 + 256);
    backend_tcp::register();
    let base = threads();
    let (sia, cia) =
        (rmr_api::open("tcp:127.0.0.1").unwrap(), rmr_api::open("tcp:127.0.0.1").unwrap());
    let (spz, cpz) = (sia.create_pz().unwrap(), cia.create_pz().unwrap());
    let (sevd, cevd, pevd) =
        (sia.create_evd().unwrap(), cia.create_evd().unwrap(), sia.create_evd().unwrap());
    // Every server EP's target: one slot of 8 bytes per pair.
    let target = MemRegion::new(8 * PAIRS);
    let tlmr = spz.register_all(&target, Access::ALL).unwrap();
    let ctx = tlmr.rmr_context();
    let psp = sia.create_psp(0, &pevd).unwrap();
    let port = psp.service();
    let next = AtomicUsize::new(0);
    let clients: Mutex<Vec<(usize, Arc<dyn Ep>)>> = Mutex::new(Vec::new());
    let mut servers: Vec<Arc<dyn Ep>> = Vec::new();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CONNECTORS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::AcqRel);
                    if i >= PAIRS {
                        break;
                    }
                    let ep = cia.create_ep(&cpz, &EpEvds::single(&cevd)).unwrap();
                    let pd = ep.connect("127.0.0.1", port, b"", Duration::from_secs(30)).unwrap();
                    assert_eq!(RmrContext::from_bytes(&pd).unwrap(), ctx);
                    clients.lock().unwrap().push((i, ep));
                }
            });
        }
        // Accept them all, as they come (a burst, many at once).
        while servers.len() < PAIRS {
            match pevd.wait(Some(Duration::from_secs(30)), 1).expect("connection requests") {
                Event::ConnectionRequest(cr) => {
                    let ep = sia.create_ep(&spz, &EpEvds::single(&sevd)).unwrap();
                    cr.accept(&ep, &ctx.to_bytes()).unwrap();
                    servers.push(ep);
                }
                e => panic!("unexpected {e:?}"),
            }
        }
    });
    let setup = t0.elapsed();
    // Settle: the helpers took over what set-up left.
    std::thread::sleep(Duration::from_millis(200));
    let after = threads();
    println!(
        "RESULT pairs={PAIRS} set-up {setup:?} ({:.0}/s, {CONNECTORS} in flight) threads {base} -> {after}",
        PAIRS as f64 / setup.as_secs_f64()
    );
    // Two IAs: a progress helper each, and the server's PSP listener.
    assert!(
        after <= base + 3,
        "{after} threads with {PAIRS} connected pairs ({base} before any IA): more than the two IAs' helpers and one listener"
    );
    // Every pair carries data: each client writes its index into its slot.
    let clients = clients.into_inner().unwrap();
    let src = MemRegion::new(8 * PAIRS);
    let slmr = cpz.register_all(&src, Access::empty()).unwrap();
    for (i, ep) in &clients {
        assert_eq!(ep.state(), EpState::Connected);
        src.store_u64(8 * *i as u64, *i as u64 + 1).unwrap();
        ep.post_rdma_write(
            &[Sge::new(&*slmr, 8 * *i as u64, 8)],
            ctx.at(8 * *i as u64),
            Cookie(*i as u64),
            DtoFlags::empty(),
        )
        .unwrap();
    }
    let mut done = vec![false; PAIRS];
    let mut n = 0;
    while n < PAIRS {
        match cevd.wait(Some(Duration::from_secs(30)), 1).expect("write completions") {
            Event::Established { .. } => {}
            Event::Dto(c) => {
                n += 1;
                c.result().unwrap();
                assert!(
                    !std::mem::replace(&mut done[c.cookie.0 as usize], true),
                    "completed twice"
                );
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    for i in 0..PAIRS {
        assert_eq!(target.load_u64(8 * i as u64).unwrap(), i as u64 + 1, "slot {i}");
    }
    println!("RESULT ok=1");
}

#[test]
fn five_hundred_twelve_pairs_cost_the_ias_threads_not_a_thread_each() {
    let _serial = serial();
    if std::env::var_os(ROLE).is_some() {
        child();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["five_hundred_twelve_pairs_cost_the_ias_threads_not_a_thread_each", "--exact"])
        .args(["--nocapture", "--test-threads", "1"])
        .env(ROLE, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for l in text.lines().chain(String::from_utf8_lossy(&out.stderr).lines()) {
        println!("  child: {l}");
    }
    assert!(out.status.success(), "the child failed");
    assert!(text.contains("RESULT ok=1"), "the child did not finish");
}

/// A burst of connectors that never send their request (or only part of
/// it) costs the PSP no thread, and a real connector behind them is
/// accepted.
#[test]
fn silent_connectors_hold_no_thread_and_do_not_block_others() {
    let _serial = serial();
    use std::io::Write;
    backend_tcp::register();
    let ia = rmr_api::open("tcp:127.0.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let (evd, pevd) = (ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let port = psp.service();
    let threads0 = rmr_threads();
    let mut silent = Vec::new();
    for i in 0..200 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        if i % 2 == 1 {
            s.write_all(&[0u8; 7]).unwrap(); // part of a header
        }
        silent.push(s);
    }
    let server = {
        let (ia, pz, evd, pevd) = (ia.clone(), pz.clone(), evd.clone(), pevd.clone());
        std::thread::spawn(move || {
            match pevd.wait(Some(Duration::from_secs(10)), 1).expect("the real request") {
                Event::ConnectionRequest(cr) => {
                    assert_eq!(cr.private_data(), b"real");
                    let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
                    cr.accept(&ep, b"welcome").unwrap();
                    ep
                }
                e => panic!("unexpected {e:?}"),
            }
        })
    };
    // Counted while the 200 wait on the listener (the accepting thread
    // above is the test's own).
    std::thread::sleep(Duration::from_millis(100));
    let pending = rmr_threads();
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let reply = ep.connect("127.0.0.1", port, b"real", Duration::from_secs(10)).unwrap();
    assert_eq!(reply, b"welcome");
    let _sep = server.join().unwrap();
    println!("RESULT threads {threads0} -> {pending} with 200 silent connectors");
    assert!(pending <= 6, "{threads0} -> {pending} rmr threads: a thread per pending connection");
    drop(silent);
}

/// Forty endpoint pairs on one EVD per side (its waiters then drive only
/// the sockets with input): every send lands, including those that wait
/// at the target for a receive posted only after the waiter found them
/// (a receive side stalled for a receive is set aside, then resumed).
#[test]
fn many_endpoints_on_one_evd_deliver_and_a_stalled_one_resumes() {
    let _serial = serial();
    const N: usize = 40;
    backend_tcp::register();
    let ia = rmr_api::open("tcp:127.0.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let (sevd, cevd, pevd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let port = psp.service();
    let inbox = MemRegion::new(8 * N);
    let ilmr = pz.register_all(&inbox, Access::LOCAL_WRITE).unwrap();
    let src = MemRegion::new(8 * N);
    let slmr = pz.register_all(&src, Access::empty()).unwrap();
    let mut pairs = Vec::new();
    for k in 0..N {
        let sep = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
        if k % 2 == 0 {
            sep.post_recv(
                &[Sge::new(&*ilmr, 8 * k as u64, 8)],
                Cookie(k as u64),
                DtoFlags::empty(),
            )
            .unwrap();
        }
        let (s2, pe) = (sep.clone(), pevd.clone());
        let t = std::thread::spawn(move || match pe.wait(Some(Duration::from_secs(10)), 1) {
            Ok(Event::ConnectionRequest(cr)) => cr.accept(&s2, b"").unwrap(),
            e => panic!("{e:?}"),
        });
        let cep = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
        cep.connect("127.0.0.1", port, b"", Duration::from_secs(10)).unwrap();
        t.join().unwrap();
        pairs.push((cep, sep));
    }
    for (k, (cep, _)) in pairs.iter().enumerate() {
        src.store_u64(8 * k as u64, 1000 + k as u64).unwrap();
        cep.post_send(&[Sge::new(&*slmr, 8 * k as u64, 8)], Cookie(k as u64), DtoFlags::SUPPRESS)
            .unwrap();
    }
    let mut got = vec![false; N];
    let take = |want: usize, got: &mut Vec<bool>| {
        let mut n = 0;
        while n < want {
            match sevd.wait(Some(Duration::from_secs(10)), 1).expect("receive completions") {
                Event::Dto(c) => {
                    c.result().unwrap();
                    assert!(!std::mem::replace(&mut got[c.cookie.0 as usize], true), "twice");
                    n += 1;
                }
                Event::Established { .. } => {}
                e => panic!("unexpected {e:?}"),
            }
        }
    };
    take(N / 2, &mut got);
    assert!(got.iter().step_by(2).all(|g| *g), "the even ones, which had receives");
    for (k, (_, sep)) in pairs.iter().enumerate().filter(|(k, _)| k % 2 == 1) {
        sep.post_recv(&[Sge::new(&*ilmr, 8 * k as u64, 8)], Cookie(k as u64), DtoFlags::empty())
            .unwrap();
    }
    take(N / 2, &mut got);
    for k in 0..N {
        assert_eq!(inbox.load_u64(8 * k as u64).unwrap(), 1000 + k as u64, "message {k}");
    }
}

/// Connections started in the background (`connect_start`), 200 at once
/// from one thread: each ends in `Established` on its connection EVD and
/// carries data; a refused one ends in `Broken` and may connect again; a
/// rejected one in `Rejected`.
#[test]
fn background_connects_many_at_once_from_one_thread() {
    let _serial = serial();
    const N: usize = 200;
    backend_tcp::register();
    let ia = rmr_api::open("tcp:127.0.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let (sevd, cevd, pevd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let port = psp.service();
    let target = MemRegion::new(8 * N);
    let tlmr = pz.register_all(&target, Access::ALL).unwrap();
    let ctx = tlmr.rmr_context();
    let threads0 = rmr_threads();
    let mut eps = Vec::new();
    for k in 0..N {
        let ep = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
        ep.connect_start("127.0.0.1", port, &(k as u64).to_le_bytes(), Duration::from_secs(20))
            .unwrap();
        eps.push(ep);
    }
    let in_flight = rmr_threads();
    // Accept them all on this thread too, then collect the outcomes.
    let mut servers = Vec::new();
    while servers.len() < N {
        match pevd.wait(Some(Duration::from_secs(20)), 1).expect("requests") {
            Event::ConnectionRequest(cr) => {
                let sep = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
                cr.accept(&sep, &ctx.to_bytes()).unwrap();
                servers.push(sep);
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    let mut up = 0;
    while up < N {
        match cevd.wait(Some(Duration::from_secs(20)), 1).expect("outcomes") {
            Event::Established { private_data, .. } => {
                assert_eq!(RmrContext::from_bytes(&private_data).unwrap(), ctx);
                up += 1;
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    println!("RESULT {N} background connects: threads {threads0} -> {in_flight} while in flight");
    // This IA's helper and listener, and at most a few lingering from the
    // tests before (a helper ends 100 ms after its IA's last endpoint):
    // nothing like one per pending connection.
    assert!(in_flight <= 6, "a thread per pending connection: {threads0} -> {in_flight}");
    let src = MemRegion::new(8 * N);
    let slmr = pz.register_all(&src, Access::empty()).unwrap();
    for (k, ep) in eps.iter().enumerate() {
        assert_eq!(ep.state(), EpState::Connected);
        src.store_u64(8 * k as u64, 7 + k as u64).unwrap();
        let sge = [Sge::new(&*slmr, 8 * k as u64, 8)];
        ep.post_rdma_write(&sge, ctx.at(8 * k as u64), Cookie(k as u64), DtoFlags::empty())
            .unwrap();
    }
    for _ in 0..N {
        match cevd.wait(Some(Duration::from_secs(20)), 1).expect("completions") {
            Event::Dto(c) => c.result().map(|_| ()).unwrap(),
            e => panic!("unexpected {e:?}"),
        }
    }
    for k in 0..N {
        assert_eq!(target.load_u64(8 * k as u64).unwrap(), 7 + k as u64);
    }
    // Refused: nothing listens there (the PSP's port, closed).
    drop(psp);
    let (evd2, gone) = (ia.create_evd().unwrap(), port);
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd2)).unwrap();
    ep.connect_start("127.0.0.1", gone, b"", Duration::from_secs(5)).unwrap();
    match evd2.wait(Some(Duration::from_secs(10)), 1).expect("the refusal") {
        Event::Broken { reason, .. } => assert!(reason.contains("connect"), "{reason}"),
        e => panic!("unexpected {e:?}"),
    }
    assert_eq!(ep.state(), EpState::Unconnected, "may connect again");
    // Rejected by the peer.
    let psp2 = ia.create_psp(0, &pevd).unwrap();
    ep.connect_start("127.0.0.1", psp2.service(), b"let me in", Duration::from_secs(5)).unwrap();
    match pevd.wait(Some(Duration::from_secs(10)), 1).expect("the request") {
        Event::ConnectionRequest(cr) => cr.reject(b"no").unwrap(),
        e => panic!("unexpected {e:?}"),
    }
    match evd2.wait(Some(Duration::from_secs(10)), 1).expect("the rejection") {
        Event::Rejected { private_data, .. } => assert_eq!(private_data, b"no"),
        e => panic!("unexpected {e:?}"),
    }
    assert_eq!(ep.state(), EpState::Unconnected);
}

/// A background connect whose endpoint is dropped before it completes
/// gives up: the peer that accepts sees the connection end, and nothing
/// stays connected for a handle nobody holds.
#[test]
fn a_background_connect_whose_endpoint_is_dropped_gives_up() {
    let _serial = serial();
    backend_tcp::register();
    let ia = rmr_api::open("tcp:127.0.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let (sevd, cevd, pevd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let ep = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
    ep.connect_start(&psp.address(), psp.service(), b"", Duration::from_secs(10)).unwrap();
    // The request is out (the handshake waits for the answer) when the
    // endpoint is dropped; the answer then finds nobody to start.
    let cr = match pevd.wait(Some(Duration::from_secs(10)), 1).expect("the request") {
        Event::ConnectionRequest(cr) => cr,
        e => panic!("unexpected {e:?}"),
    };
    drop(ep);
    let sep = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
    if cr.accept(&sep, b"").is_err() {
        // The connector had already given up and closed: nothing to end.
        assert!(cevd.dequeue().is_none());
        return;
    }
    loop {
        match sevd.wait(Some(Duration::from_secs(10)), 1).expect("the end of the connection") {
            Event::Broken { .. } | Event::Disconnected { .. } => break,
            _ => {}
        }
    }
    let ev = cevd.dequeue();
    assert!(ev.is_none(), "the dropped endpoint reported an event: {ev:?}");
}
