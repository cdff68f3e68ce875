//! Fault campaign in the lab (network namespaces joined by a veth pair,
//! scripts/lab.sh; needs root, as CI has; the lab is removed even when a
//! test fails): a peer process killed mid-transfer, a peer that vanishes
//! behind a cut link, and a receiver that runs out of posted buffers.
//! Each must end in a typed error on every endpoint within a bounded wait,
//! with every posted DTO completed exactly once and no thread or
//! descriptor left behind.

use rmr_api::Cookie;
use rmr_api::{
    Access, DtoFlags, EpEvds, EpState, Error, Evd, Event, MemRegion, RmrContext, Sge, Status,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

const ROLE: &str = "RMR_TEST_FAULT_ROLE";
const SERVICE: u16 = 7700;
const NEPS: usize = 8;
const CHUNK: u64 = 64 << 10;
static SERIAL: Mutex<()> = Mutex::new(());

fn lab_script() -> String {
    format!("{}/../scripts/lab.sh", env!("CARGO_MANIFEST_DIR"))
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

/// A lab that removes itself when dropped.
struct Lab(&'static str);

impl Lab {
    fn pair(prefix: &'static str, rates: &str) -> Option<Lab> {
        if !is_root() {
            println!("SKIPPED: lab tests need root for network namespaces");
            return None;
        }
        let out =
            Command::new("bash").args([&lab_script(), "pair", prefix, rates]).output().unwrap();
        assert!(out.status.success(), "lab.sh: {}", String::from_utf8_lossy(&out.stderr));
        Some(Lab(prefix))
    }
    fn ns(&self, side: char) -> String {
        format!("{}-{side}", self.0)
    }
    fn cut(&self, rail: usize) {
        assert!(
            Command::new("bash")
                .args([&lab_script(), "cut", self.0, &rail.to_string()])
                .status()
                .unwrap()
                .success()
        );
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash").args([&lab_script(), "down", self.0]).status();
    }
}

/// A child process that is killed when dropped (a failing test leaves none).
struct Proc(Option<Child>);

impl Proc {
    fn spawn(ns: &str, test: &str, role: &str) -> Proc {
        let exe = std::env::current_exe().unwrap();
        let c = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .env(ROLE, role)
            .env("RMR_TCP_USER_TIMEOUT_MS", "1500")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Proc(Some(c))
    }
    /// Lines of its output, as they come.
    fn lines(&mut self) -> mpsc::Receiver<String> {
        let out = self.0.as_mut().unwrap().stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                println!("  child: {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        rx
    }
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
    fn wait(&mut self) -> bool {
        self.0.take().map(|mut c| c.wait().unwrap().success()).unwrap_or(false)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait_for(rx: &mpsc::Receiver<String>, key: &str, within: Duration) -> String {
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                if let Some(v) =
                    l.split_once(&format!("RESULT {key}=")).map(|(_, v)| v.trim().to_string())
                {
                    return v;
                }
            }
            Err(_) => panic!("no RESULT {key} within {within:?}"),
        }
    }
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Server role: accept NEPS endpoints onto a 1 MiB target, then wait to be killed.
fn server() {
    backend_tcp::register();
    let ia = rmr_api::open("tcp:198.18.0.2").unwrap();
    let (pz, pevd, evd) =
        (ia.create_pz().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let target = MemRegion::new(1 << 20);
    let tl = pz.register_all(&target, Access::REMOTE_WRITE | Access::LOCAL_WRITE).unwrap();
    let _psp = ia.create_psp(SERVICE, &pevd).unwrap();
    println!("RESULT listening=1");
    let mut eps = Vec::new();
    while eps.len() < NEPS {
        if let Event::ConnectionRequest(cr) = pevd.wait(Some(Duration::from_secs(30)), 1).unwrap() {
            let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
            cr.accept(&ep, &tl.rmr_context().to_bytes()).unwrap();
            eps.push(ep);
        }
    }
    println!("RESULT accepted={}", eps.len());
    std::thread::sleep(Duration::from_secs(60));
}

/// Client role: NEPS endpoints stream signalled 64 KiB writes until every
/// one of them is broken; every DTO must complete exactly once, every EP
/// must report Broken, and the threads and descriptors must go away.
fn client() {
    backend_tcp::register();
    let ia = rmr_api::open("tcp:198.18.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let src = MemRegion::new(CHUNK as usize);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let (threads0, fds0) = (count("/proc/self/task"), count("/proc/self/fd"));
    let evd = ia.create_evd().unwrap();
    let mut eps = Vec::new();
    let mut cevds: Vec<Arc<dyn Evd>> = Vec::new();
    let mut ctx: Option<RmrContext> = None;
    let start = Instant::now();
    while eps.len() < NEPS {
        let cevd = ia.create_evd().unwrap();
        let ep = ia
            .create_ep(&pz, &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() })
            .unwrap();
        match ep.connect("198.18.0.2", SERVICE, b"", Duration::from_secs(5)) {
            Ok(pd) => {
                ctx = Some(RmrContext::from_bytes(&pd).unwrap());
                eps.push(ep);
                cevds.push(cevd);
            }
            Err(_) if start.elapsed() < Duration::from_secs(15) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
    let ctx = ctx.unwrap();
    let index: HashMap<u64, usize> = eps.iter().enumerate().map(|(i, e)| (e.id().0, i)).collect();
    let (mut posted, mut done, mut failed) = (vec![0u64; NEPS], vec![0u64; NEPS], vec![0u64; NEPS]);
    let mut broken = vec![None::<String>; NEPS];
    let mut cookie = 0u64;
    let mut announced = false;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        for i in 0..NEPS {
            if broken[i].is_some() {
                continue;
            }
            while posted[i] - done[i] - failed[i] < 32 {
                cookie += 1;
                let off = (cookie % 16) * CHUNK;
                match eps[i].post_rdma_write(
                    &[Sge::whole(&*sl)],
                    ctx.at(off),
                    Cookie(cookie),
                    DtoFlags::empty(),
                ) {
                    Ok(()) => posted[i] += 1,
                    Err(Error::QueueFull) => break,
                    Err(Error::Broken(_)) | Err(Error::NotConnected) => break,
                    Err(e) => panic!("post: {e}"),
                }
            }
        }
        while let Some(ev) = evd.dequeue() {
            if let Event::Dto(c) = ev {
                let i = index[&c.ep.0];
                if c.status.is_ok() {
                    done[i] += 1;
                } else {
                    assert!(matches!(c.status, Status::Broken | Status::Flushed), "{c:?}");
                    failed[i] += 1;
                }
            }
        }
        for (i, cevd) in cevds.iter().enumerate() {
            while let Some(ev) = cevd.dequeue() {
                match ev {
                    Event::Broken { reason, .. } => broken[i] = Some(reason),
                    Event::Disconnected { .. } => {
                        panic!("EP {i}: a killed peer is not an orderly disconnect")
                    }
                    _ => {}
                }
            }
        }
        let total: u64 = done.iter().sum();
        if !announced && total >= 200 {
            announced = true;
            println!("RESULT streaming=1");
        }
        let settled = (0..NEPS).all(|i| broken[i].is_some() && posted[i] == done[i] + failed[i]);
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "HANG: broken {:?}, posted {posted:?}, ok {done:?}, failed {failed:?}; {:?}",
            broken.iter().map(Option::is_some).collect::<Vec<_>>(),
            eps.iter().map(|e| e.attr().notes).collect::<Vec<_>>()
        );
        let _ = evd.wait(Some(Duration::from_millis(20)), 1).map(|ev| {
            if let Event::Dto(c) = ev {
                let i = index[&c.ep.0];
                if c.status.is_ok() { done[i] += 1 } else { failed[i] += 1 }
            }
        });
    }
    for (i, ep) in eps.iter().enumerate() {
        assert_eq!(ep.state(), EpState::Broken, "EP {i}");
        assert!(
            ep.post_rdma_write(&[Sge::whole(&*sl)], ctx.at(0), Cookie(0), DtoFlags::empty())
                .is_err()
        );
    }
    let bytes: u64 = done.iter().sum::<u64>() * CHUNK;
    println!(
        "RESULT dtos={} ok={} failed={} bytes={bytes}",
        posted.iter().sum::<u64>(),
        done.iter().sum::<u64>(),
        failed.iter().sum::<u64>()
    );
    println!("RESULT reasons={:?}", broken.iter().flatten().collect::<Vec<_>>());
    drop(eps);
    drop(cevds);
    drop(evd);
    // Progress threads end with their connections: wait (bounded) for them.
    let end = Instant::now() + Duration::from_secs(10);
    while count("/proc/self/task") > threads0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (threads1, fds1) = (count("/proc/self/task"), count("/proc/self/fd"));
    println!("RESULT threads={threads0}->{threads1} fds={fds0}->{fds1}");
    assert!(threads1 <= threads0, "threads left behind: {threads0} -> {threads1}");
    assert!(fds1 <= fds0, "descriptors left behind: {fds0} -> {fds1}");
    println!("RESULT ok=1");
}

fn role_or(parent: impl FnOnce()) {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => server(),
        Ok("client") => client(),
        _ => parent(),
    }
}

fn campaign(test: &str, prefix: &'static str, silent: bool) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lab) = Lab::pair(prefix, "1gbit") else { return };
    let mut srv = Proc::spawn(&lab.ns('b'), test, "server");
    let srx = srv.lines();
    wait_for(&srx, "listening", Duration::from_secs(20));
    let mut cli = Proc::spawn(&lab.ns('a'), test, "client");
    let crx = cli.lines();
    wait_for(&srx, "accepted", Duration::from_secs(30));
    wait_for(&crx, "streaming", Duration::from_secs(30));
    if silent {
        // The peer vanishes without a word: the link goes first, so no FIN
        // or RST can reach us; only TCP_USER_TIMEOUT/keepalive can tell.
        lab.cut(0);
    }
    let killed = Instant::now();
    srv.kill();
    assert_eq!(wait_for(&crx, "ok", Duration::from_secs(60)), "1");
    println!("every EP broken and settled {:?} after the kill", killed.elapsed());
    assert!(cli.wait(), "client failed");
}

#[test]
fn lab_peer_killed_mid_transfer_breaks_every_ep() {
    role_or(|| campaign("lab_peer_killed_mid_transfer_breaks_every_ep", "rmrf1", false));
}

#[test]
fn lab_peer_vanishes_behind_cut_link_breaks_every_ep() {
    role_or(|| campaign("lab_peer_vanishes_behind_cut_link_breaks_every_ep", "rmrf2", true));
}

/// A sender that outruns the receiver's posted buffers: the receiver waits
/// `rnr_timeout` for a buffer, then NAKs (ReceiverNotReady) and breaks.
/// Both sides get a typed answer; nothing hangs.
#[test]
fn receive_buffers_exhausted_is_a_clear_error() {
    use backend_tcp::{TcpConfig, TcpIa};
    let cfg = TcpConfig { rnr_timeout: Duration::from_millis(300), ..TcpConfig::default() };
    let ia: Arc<dyn rmr_api::Ia> =
        Arc::new(TcpIa::with_config("127.0.0.1".parse().unwrap(), cfg).unwrap());
    let (pz, pevd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let (aevd, acevd, bevd, bcevd) = (
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
        ia.create_evd().unwrap(),
    );
    let a = ia
        .create_ep(&pz, &EpEvds { request: aevd.clone(), recv: aevd.clone(), conn: acevd.clone() })
        .unwrap();
    let b = ia
        .create_ep(&pz, &EpEvds { request: bevd.clone(), recv: bevd.clone(), conn: bcevd.clone() })
        .unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    let a2 = a.clone();
    let h = std::thread::spawn(move || a2.connect(&addr, svc, b"", Duration::from_secs(10)));
    match pevd.wait(Some(Duration::from_secs(10)), 1).unwrap() {
        Event::ConnectionRequest(cr) => cr.accept(&b, b"").unwrap(),
        e => panic!("{e:?}"),
    }
    h.join().unwrap().unwrap();
    let buf = MemRegion::new(4096);
    let lmr = pz.register_all(&buf, Access::LOCAL_WRITE).unwrap();
    const POSTED: u64 = 4;
    for i in 0..POSTED {
        b.post_recv(&[Sge::new(&*lmr, i * 64, 64)], Cookie(100 + i), DtoFlags::empty()).unwrap();
    }
    for i in 0..POSTED + 4 {
        a.post_send(&[Sge::new(&*lmr, 1024, 32)], Cookie(i), DtoFlags::empty()).unwrap();
    }
    // Sender: the posted receives' sends succeed, the next one fails with
    // ReceiverNotReady, the rest are flushed by the break.
    let mut statuses = Vec::new();
    while statuses.len() < (POSTED + 4) as usize {
        match aevd.wait(Some(Duration::from_secs(20)), 1) {
            Ok(Event::Dto(c)) => statuses.push((c.cookie.0, c.status)),
            Ok(_) => {}
            Err(e) => panic!("HANG: sender completions {statuses:?}: {e}"),
        }
    }
    statuses.sort_by_key(|(c, _)| *c);
    for (c, s) in &statuses[..POSTED as usize] {
        assert!(s.is_ok(), "send {c}: {s:?}");
    }
    assert_eq!(statuses[POSTED as usize].1, Status::ReceiverNotReady, "{statuses:?}");
    assert!(statuses[POSTED as usize + 1..].iter().all(|(_, s)| !s.is_ok()), "{statuses:?}");
    // Receiver: its receives completed, then its EP broke saying why.
    for i in 0..POSTED {
        match bevd.wait(Some(Duration::from_secs(20)), 1).unwrap() {
            Event::Dto(c) => assert!(c.status.is_ok() && c.cookie == 100 + i, "{c:?}"),
            e => panic!("{e:?}"),
        }
    }
    loop {
        match bcevd.wait(Some(Duration::from_secs(20)), 1).expect("receiver end event") {
            Event::Broken { reason, .. } => {
                assert!(reason.contains("receiver not ready"), "{reason}");
                break;
            }
            Event::Established { .. } => {}
            e => panic!("{e:?}"),
        }
    }
    loop {
        match acevd.wait(Some(Duration::from_secs(20)), 1).expect("sender end event") {
            Event::Broken { .. } | Event::Disconnected { .. } => break,
            Event::Established { .. } => {}
            e => panic!("{e:?}"),
        }
    }
}
