//! Hostile peers: a raw socket speaking the wire format by hand sends what
//! a correct peer never would. Each attack must end in a typed answer — a
//! NAK with the right status, a broken endpoint with a protocol error, or a
//! refused connection — while the attacked process keeps serving its good
//! peer (checked during and after every attack), refused accesses leave the
//! target memory byte-for-byte unchanged, and memory stays bounded.
//!
//! The tests share one process's RSS figures, so they run one at a time.

mod support;

use backend_tcp::wire::{F_ACK_REQ, HDR, Header, MAX_PAYLOAD, Op};
use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, Error, Event, MemRegion, RmrContext, Sge, Status};
use std::io::{ErrorKind, Read, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::raw::{self, FILL, LEN, RawPeer, Target, expect_broken, note, rss};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn truncated_header_breaks_only_that_endpoint() {
    let _g = serial();
    let mut t = Target::new();
    let (mut raw, ep, _evd, cevd) = t.accept_raw();
    let mut h = raw.request(Op::Write);
    h.key = t.rw.ctx().key();
    h.addr = t.rw.ctx().addr;
    h.len = 16;
    let b = h.data_frame(&[]);
    raw.s.write_all(&b[..b.len() / 2]).unwrap();
    t.good_works();
    raw.s.shutdown(std::net::Shutdown::Write).unwrap();
    let why = expect_broken(&cevd);
    assert!(why.contains("closed"), "{why}");
    assert!(matches!(ep.post_send(&[], Cookie(1), DtoFlags::empty()), Err(Error::Broken(_))));
    t.untouched();
    t.good_works();
}

#[test]
fn truncated_payload_lands_nothing_outside_its_range() {
    let _g = serial();
    let mut t = Target::new();
    let (mut raw, _ep, _evd, cevd) = t.accept_raw();
    let mut h = raw.request(Op::Write);
    h.key = t.rw.ctx().key();
    h.addr = t.rw.ctx().addr + 100;
    h.len = 1000;
    raw.send(&h, &[7u8; 10]).unwrap();
    t.good_works();
    drop(raw);
    expect_broken(&cevd);
    let v = t.rw.bytes();
    // Up to the 10 bytes that arrived may have landed, at 100..110, nowhere else.
    assert!(v[..100].iter().chain(&v[110..]).all(|&b| b == FILL));
    t.good_works();
}

#[test]
fn overflowing_lengths_are_refused() {
    let _g = serial();
    let mut t = Target::new();
    // An address whose end overflows u64: a NAK, and the stream goes on.
    let (mut raw, _ep, _evd, cevd) = t.accept_raw();
    let mut h = raw.request(Op::Write);
    h.key = t.rw.ctx().key();
    h.addr = u64::MAX - 8;
    h.len = 64;
    raw.send(&h, &[1u8; 64]).unwrap();
    raw.expect_nak(h.seq, Status::OutOfBounds);
    // A read whose length overflows the region's end.
    let mut r = raw.request(Op::ReadReq);
    r.key = t.rw.ctx().key();
    r.addr = t.rw.ctx().addr + 8;
    r.arg0 = MAX_PAYLOAD;
    raw.send(&r, &[]).unwrap();
    raw.expect_nak(r.seq, Status::OutOfBounds);
    t.untouched();
    // The same connection still works for a correct write.
    raw.write_acked(&t.rw.ctx(), 0, &[FILL; 32]);
    t.good_works();
    // A read longer than any frame may carry: a protocol error.
    let mut r = raw.request(Op::ReadReq);
    r.key = t.rw.ctx().key();
    r.addr = t.rw.ctx().addr;
    r.arg0 = u64::MAX;
    raw.send(&r, &[]).unwrap();
    let why = expect_broken(&cevd);
    assert!(why.contains("protocol error"), "{why}");
    // A frame length over the protocol's limit: a protocol error, nothing read into memory.
    let (mut raw, _ep, _evd, cevd) = t.accept_raw();
    let mut h = raw.request(Op::Write);
    h.key = t.rw.ctx().key();
    h.addr = t.rw.ctx().addr;
    h.len = u32::MAX;
    raw.send(&h, &[9u8; 4096]).unwrap();
    let why = expect_broken(&cevd);
    assert!(why.contains("protocol error") && why.contains("length"), "{why}");
    t.untouched();
    t.good_works();
}

#[test]
fn key_of_another_pz_offset_past_region_and_read_of_write_only_are_naked() {
    let _g = serial();
    let mut t = Target::new();
    let (mut raw, ep, evd, _cevd) = t.accept_raw();
    let (rw, wo, other) = (t.rw.ctx(), t.wo.ctx(), t.other.ctx());
    let cases: [(Op, RmrContext, u64, u64, Status); 7] = [
        (Op::Write, other, 0, 64, Status::Protection),
        (Op::ReadReq, other, 0, 64, Status::Protection),
        (Op::Write, rw, LEN as u64, 1, Status::OutOfBounds),
        (Op::Write, rw, LEN as u64 - 8, 16, Status::OutOfBounds),
        (Op::Write, RmrContext::new(rw.key(), rw.addr - 64, 0), 0, 64, Status::OutOfBounds),
        (Op::ReadReq, wo, 0, 64, Status::RemoteAccess),
        (Op::Write, RmrContext::new(rw.key() ^ 1, rw.addr, 0), 0, 8, Status::BadKey),
    ];
    for (op, ctx, off, len, want) in cases {
        let mut h = raw.request(op);
        h.key = ctx.key();
        h.addr = ctx.addr.wrapping_add(off);
        let payload = if op == Op::Write {
            h.len = len as u32;
            vec![0xeeu8; len as usize]
        } else {
            h.arg0 = len;
            vec![]
        };
        raw.send(&h, &payload).unwrap();
        raw.expect_nak(h.seq, want);
        t.untouched();
        t.good_works();
    }
    // Refusals are not protocol errors: the endpoint is still connected,
    // and nothing was completed on the target's side.
    assert_eq!(ep.state(), rmr_api::EpState::Connected);
    assert!(evd.dequeue().is_none());
    raw.write_acked(&t.rw.ctx(), 0, &[FILL; 8]);
}

#[test]
fn connection_request_flood_is_bounded_and_good_peers_keep_working() {
    let _g = serial();
    raise_nofile(8192);
    let mut t = Target::new();
    let before = rss();
    // More unanswered requests than a PSP keeps (1024), plus silent connectors.
    let mut floods = Vec::new();
    for i in 0..1300 {
        floods.push(RawPeer::connect(t.psp_addr(), b"flood"));
        if i % 300 == 0 {
            t.good_works();
        }
    }
    let mut silent: Vec<std::net::TcpStream> =
        (0..200).map(|_| std::net::TcpStream::connect(t.psp_addr()).unwrap()).collect();
    t.good_works();
    // Collect what reached the application: at most the PSP's bound.
    let mut reqs = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        match t.psp_evd.wait(Some(Duration::from_millis(500)), 1) {
            Ok(Event::ConnectionRequest(cr)) => reqs.push(cr),
            Ok(e) => panic!("{e:?}"),
            Err(_) => {
                if reqs.len() >= 1024 {
                    break;
                }
            }
        }
    }
    assert!(reqs.len() <= 1024, "{} pending connection requests kept", reqs.len());
    assert!(reqs.len() >= 1000, "only {} of the flood's requests arrived", reqs.len());
    // Those past the bound were refused: closed without an answer.
    let mut refused = 0;
    for p in &mut floods {
        p.s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut b = [0u8; 1];
        match p.s.read(&mut b) {
            Ok(0) => refused += 1,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => refused += 1,
            _ => {}
        }
    }
    assert!(refused >= 1300 - 1024, "only {refused} connections refused");
    let grown = rss().saturating_sub(before);
    assert!(grown < 64 << 20, "RSS grew by {grown} bytes under the flood");
    // Answer the flood; the PSP serves new connectors again.
    for cr in reqs.drain(..) {
        let _ = cr.reject(b"busy");
    }
    drop(floods);
    silent.clear();
    let (mut raw, _ep, _evd, _cevd) = t.accept_raw();
    raw.write_acked(&t.rw.ctx(), 0, &[FILL; 8]);
    t.good_works();
    println!("flood: {} requests delivered, {refused} refused, RSS +{} KiB", 1024, grown >> 10);
}

#[test]
fn connection_request_of_another_protocol_version_is_refused() {
    let _g = serial();
    let mut t = Target::new();
    // A request as the first version of the protocol wrote it (every frame
    // a 56-byte header): rejected with the reason, in the handshake's
    // header that version reads, then closed; never an application's
    // connection request.
    let mut s = std::net::TcpStream::connect(t.psp_addr()).unwrap();
    let mut h = Header::new(Op::ConnReq);
    h.arg0 = 0x524d_5201;
    h.len = 3;
    s.write_all(&[h.encode().as_slice(), b"old"].concat()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hb = [0u8; HDR];
    s.read_exact(&mut hb).expect("a rejection");
    let r = Header::decode(&hb);
    assert_eq!(r.validate(), Ok(Op::ConnReject));
    let mut why = vec![0u8; r.len as usize];
    s.read_exact(&mut why).unwrap();
    let why = String::from_utf8(why).unwrap();
    assert!(why.contains("version 1") && why.contains("version 2"), "{why}");
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        r => panic!("more than a rejection: {r:?}"),
    }
    match t.psp_evd.wait(Some(Duration::from_millis(200)), 1) {
        Err(Error::Timeout) => {}
        r => panic!("{r:?}"),
    }
    t.good_works();
}

#[test]
fn peer_that_stops_reading_gets_queue_full_not_unbounded_memory() {
    let _g = serial();
    let mut t = Target::new();
    let (raw, ep, _evd, _cevd) = t.accept_raw();
    // The raw peer never reads and never acknowledges.
    let src = MemRegion::new(1 << 20);
    let sl = t.pz.register_all(&src, Access::empty()).unwrap();
    let far = RmrContext::new(0xdead, 0x1000, 1 << 30);
    let max = ep.attr().max_dtos as u64;
    let before = rss();
    let mut posted = 0u64;
    let mut full = 0u64;
    for i in 0..(2 * max) {
        let len = if i % 2 == 0 { 1 << 10 } else { 256 << 10 };
        match ep.post_rdma_write(
            &[Sge::new(&*sl, 0, len)],
            far.at(0),
            Cookie(i),
            DtoFlags::SUPPRESS,
        ) {
            Ok(()) => posted += 1,
            Err(Error::QueueFull) => full += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
        if i % 1024 == 0 {
            t.good_works();
        }
    }
    assert!(full > 0, "never QueueFull while the peer does not read");
    assert!(posted <= max, "{posted} DTOs accepted, window {max}");
    let grown = rss().saturating_sub(before);
    // The window holds references to registered memory, and at most 4 KiB
    // copies of small frames: far below the 0.5 GiB the posts address.
    assert!(grown < 48 << 20, "RSS grew by {grown} bytes");
    t.good_works();
    drop(raw);
    println!("posted {posted}, QueueFull {full}, RSS +{} KiB", grown >> 10);
}

#[test]
fn request_flood_from_a_peer_that_stops_reading_is_bounded() {
    let _g = serial();
    let mut t = Target::new();
    let (mut raw, ep, _evd, _cevd) = t.accept_raw();
    raw.s.set_nonblocking(true).unwrap();
    let before = rss();
    // Read requests (each answered with up to 64 KiB) and bad-key requests
    // (each answered with a NAK), as fast as the socket takes them, never
    // reading a response. Stop once the target stopped taking requests
    // (the socket stays full), or after 2 million requests.
    let mut batch = Vec::new();
    let mut sent = 0u64;
    let mut seq = 1u64;
    let mut blocked_since: Option<Instant> = None;
    let mut buf: Vec<u8>;
    let mut pending: &[u8] = &[];
    while sent < 2_000_000 {
        if pending.is_empty() {
            batch.clear();
            for k in 0..256 {
                let mut h = Header::new(Op::ReadReq);
                h.seq = seq;
                seq += 1;
                h.key = if k % 2 == 0 { t.rw.ctx().key() } else { 0x1234 };
                h.addr = t.rw.ctx().addr;
                h.arg0 = LEN as u64;
                h.flags = F_ACK_REQ;
                batch.extend_from_slice(&h.data_frame(&[]));
            }
            buf = batch.clone();
            pending = &buf;
        }
        match raw.s.write(pending) {
            Ok(n) => {
                if n == pending.len() {
                    sent += 256;
                }
                pending = &pending[n..];
                blocked_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(1) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("target closed on a valid request stream: {e}"),
        }
        if sent % (64 * 256) == 0 && pending.is_empty() {
            t.good_works();
        }
    }
    let txq = note(&ep, "txq");
    let grown = rss().saturating_sub(before);
    t.good_works();
    println!("{sent} requests taken, txq {txq}, RSS +{} KiB", grown >> 10);
    assert!(sent < 2_000_000, "the target kept taking requests it could not answer ({sent})");
    assert!(txq <= 3 * ep.attr().max_dtos as u64 + 1, "{txq} responses queued");
    assert!(grown < 64 << 20, "RSS grew by {grown} bytes");
    assert_eq!(ep.state(), rmr_api::EpState::Connected);
    t.untouched();
    let _ = raw::WAIT;
}

/// The `stat` file of the thread named `name`, opened now (reading it later
/// needs no new descriptor). A new thread names itself once it first runs,
/// so this looks for up to 5 s.
fn thread_stat(name: &str) -> Option<std::fs::File> {
    let end = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        for t in std::fs::read_dir("/proc/self/task").ok()? {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            // The kernel keeps 15 bytes of a thread's name.
            if comm.trim() == &name[..name.len().min(15)] {
                return std::fs::File::open(dir.join("stat")).ok();
            }
        }
        if std::time::Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// CPU ticks (user + system) in a thread's `stat`.
fn ticks(stat: &std::fs::File) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; 1024];
    let n = stat.read_at(&mut b, 0).unwrap();
    let s = String::from_utf8_lossy(&b[..n]);
    let f: Vec<&str> = s.rsplit_once(") ").unwrap().1.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// Child role of [`listener_out_of_descriptors_backs_off_and_recovers`],
/// run under `prlimit --nofile=96`.
fn out_of_descriptors_child() {
    let t = Target::new();
    let stat = thread_stat(&format!("rmr-tcp-psp{}", t.psp.service())).expect("listener thread");
    // Connect until this process has no descriptor left: the listener's
    // accept then fails (EMFILE) for every pending connection.
    let mut conns = Vec::new();
    while let Ok(s) = std::net::TcpStream::connect(t.psp_addr()) {
        conns.push(s);
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = ticks(&stat);
    std::thread::sleep(Duration::from_secs(1));
    let used = ticks(&stat) - before;
    println!("RESULT ticks={used}");
    // Free descriptors: the listener serves again.
    drop(conns);
    std::thread::sleep(Duration::from_millis(100));
    let (mut raw, _ep, _evd, _cevd) = t.accept_raw();
    raw.write_acked(&t.rw.ctx(), 0, &[FILL; 8]);
    println!("RESULT recovered=1");
}

#[test]
fn listener_out_of_descriptors_backs_off_and_recovers() {
    const NAME: &str = "listener_out_of_descriptors_backs_off_and_recovers";
    if std::env::var("RMR_TEST_HOSTILE_CHILD").is_ok() {
        return out_of_descriptors_child();
    }
    let _g = serial();
    let out = std::process::Command::new("prlimit")
        .args(["--nofile=96:96", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads", "1"])
        .env("RMR_TEST_HOSTILE_CHILD", "1")
        .output()
        .expect("run prlimit");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{s}\n{}", String::from_utf8_lossy(&out.stderr));
    let ticks: u64 = s
        .lines()
        .find_map(|l| l.split_once("RESULT ticks=").map(|(_, v)| v))
        .expect("ticks")
        .trim()
        .parse()
        .unwrap();
    // A spinning accept loop burns the whole second (~100 ticks); backing off, almost nothing.
    assert!(ticks < 30, "the listener spun on EMFILE: {ticks} ticks in 1 s");
    assert!(s.contains("RESULT recovered=1"));
}

/// A peer that resets the connection while the target posts: a post that
/// returns an error must not also complete, and every post that succeeded
/// completes exactly once (success or flushed).
#[test]
fn reset_during_posts_every_accepted_dto_completes_once() {
    let _g = serial();
    let mut t = Target::new();
    for round in 0..5 {
        let (raw, ep, evd, cevd) = t.accept_raw();
        let src = MemRegion::new(64 << 10);
        let sl = t.pz.register_all(&src, Access::empty()).unwrap();
        let far = RmrContext::new(0xdead, 0x1000, 1 << 30);
        // Reset (SO_LINGER 0): the target's next send fails outright.
        socket2::SockRef::from(&raw.s).set_linger(Some(Duration::ZERO)).unwrap();
        drop(raw);
        let mut accepted = std::collections::HashSet::new();
        for i in 0..2000u64 {
            let len = if i % 2 == 0 { 64 << 10 } else { 64 };
            match ep.post_rdma_write(
                &[Sge::new(&*sl, 0, len)],
                far.at(0),
                Cookie(i),
                DtoFlags::empty(),
            ) {
                Ok(()) => {
                    accepted.insert(i);
                }
                Err(Error::Broken(_)) | Err(Error::NotConnected) => {}
                Err(Error::QueueFull) => break,
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        expect_broken(&cevd);
        let mut seen = std::collections::HashSet::new();
        while let Some(ev) = evd.dequeue() {
            if let Event::Dto(c) = ev {
                assert!(
                    accepted.contains(&c.cookie.0),
                    "round {round}: a failed post completed: {c:?}"
                );
                assert!(seen.insert(c.cookie.0), "round {round}: completed twice: {c:?}");
            }
        }
        assert_eq!(seen.len(), accepted.len(), "round {round}: accepted DTOs never completed");
        t.good_works();
    }
}

/// Raises this process's open-file soft limit to `want` (or the hard limit)
/// when it is lower: the flood needs ~3,000 descriptors.
fn raise_nofile(want: u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let Some(line) = limits.lines().find(|l| l.starts_with("Max open files")) else { return };
    let v: Vec<&str> = line.split_whitespace().collect();
    let soft = v[3].parse::<u64>().unwrap_or(u64::MAX);
    let hard = v[4];
    if soft < want {
        let n = hard.parse::<u64>().map_or(want, |h| want.min(h));
        let _ = std::process::Command::new("prlimit")
            .args(["--pid", &std::process::id().to_string(), &format!("--nofile={n}:{hard}")])
            .status();
    }
}
