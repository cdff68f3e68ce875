//! Small RDMA writes corked with what follows them on libfabric's `tcp`
//! provider (backend-ofi's `cork` module), over real endpoints on loopback:
//! - in a write + send ping-pong every write is visible before its send
//!   arrives, and writes were corked and sent by the send after them;
//! - a lone corked write whose poster then sleeps reaches its target, sent
//!   by a progress thread (not by the kernel's 200 ms cork ceiling);
//! - a lone corked write whose poster then waits on its EVD is sent as the
//!   wait begins;
//! - on a link with an Ethernet MTU (a namespace whose loopback has MTU
//!   1500) only writes that fit one segment with their send are corked;
//! - the `sockets` provider and `cork_max=0` never cork.
//!
//! And small suppressed writes held for the next send (backend-ofi's
//! `eager` and `hold` modules; the corking cases above run with
//! `eager_max=0`):
//! - in the ping-pong, 8-byte writes are held and ride in their sends,
//!   visible before the send completes at the peer;
//! - a lone held write whose poster then sleeps is posted by a progress
//!   thread; one whose poster then waits, as the wait begins;
//! - beside a ping-pong, progress threads nap longer than a millisecond
//!   (their `ofi.progress` wake-ups), and after it a lone held write is
//!   still posted by one and placed at its target by the other's; beside
//!   waits of 30 ms, one sleeps until each wait ends (a few passes a wait);
//! - a small write with immediate rides in its own message.

use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, Event, Ia, Lmr, MemRegion, Psp, Pz, Sge};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);

struct Side {
    ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
    pevd: Arc<dyn rmr_api::Evd>,
    psp: Arc<dyn Psp>,
}

type EpAndEvd = (Arc<dyn Ep>, Arc<dyn rmr_api::Evd>);

fn side(spec: &str) -> Side {
    backend_ofi::register();
    let ia = rmr_api::open(spec).unwrap();
    let (pz, pevd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    Side { ia, pz, pevd, psp }
}

impl Side {
    fn ep(&self) -> EpAndEvd {
        let evd = self.ia.create_evd().unwrap();
        (self.ia.create_ep(&self.pz, &EpEvds::single(&evd)).unwrap(), evd)
    }

    /// A connected pair: a fresh EP here connected to one accepted here.
    fn pair(&self) -> [EpAndEvd; 2] {
        let (a, aevd) = self.ep();
        let (addr, svc) = (self.psp.address(), self.psp.service());
        std::thread::scope(|s| {
            let a2 = a.clone();
            let h = s.spawn(move || a2.connect(&addr, svc, b"", WAIT).unwrap());
            let (b, bevd) = self.ep();
            match self.pevd.wait(Some(WAIT), 1).expect("a connection request") {
                Event::ConnectionRequest(cr) => cr.accept(&b, b"").unwrap(),
                other => panic!("unexpected {other:?}"),
            }
            h.join().unwrap();
            [(a, aevd), (b, bevd)]
        })
    }
}

/// The numbers of the EP's cork note: corked, sent by a post, of those
/// before a post (not to spill a segment), by a waiter, by the progress
/// thread, the largest write corked; held, rode in a send, posted alone by
/// a post, by a waiter, by the progress thread; `None` when it corks
/// nothing.
fn note(ep: &Arc<dyn Ep>) -> Option<[u64; 11]> {
    let note = ep.attr().note("ofi.cork").expect("an ofi.cork note").to_string();
    if note == "off" {
        return None;
    }
    let n: Vec<u64> = note
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    Some(n.try_into().unwrap_or_else(|n| panic!("note {note:?}: {n:?}")))
}

/// The EP's counts of held writes: held, rode in a send, posted alone by
/// a post, by a waiter, by the progress thread.
fn held(ep: &Arc<dyn Ep>) -> [u64; 5] {
    note(ep).unwrap()[6..].try_into().unwrap()
}

/// The holding cases' IA (pinned: the environment may say otherwise).
const HOLDING: &str = "ofi:tcp:127.0.0.1;eager_max=88;cork_max=16384;progress_thread=1";

/// The kernel corking cases' IA: no write is held.
const CORKING: &str = "ofi:tcp:127.0.0.1;eager_max=0;cork_max=16384";

/// The EP's cork counts: corked, sent by a post, by a waiter, by the
/// progress thread; `None` when it corks nothing.
fn counts(ep: &Arc<dyn Ep>) -> Option<[u64; 4]> {
    note(ep).map(|n| [n[0], n[1], n[3], n[4]])
}

/// Corked writes sent before a post that would not have fit beside them.
fn spilled(ep: &Arc<dyn Ep>) -> u64 {
    note(ep).unwrap()[2]
}

/// The largest write the EP corks.
fn cork_max(ep: &Arc<dyn Ep>) -> u64 {
    note(ep).unwrap()[5]
}

/// Where receives land in an end's `src` region (past any write's source).
const RECV_AT: u64 = 12 << 10;

/// One end of the ping-pong: its EP, EVD, the region peers write into
/// (word 0) and its send/receive buffers.
struct End {
    ep: Arc<dyn Ep>,
    evd: Arc<dyn rmr_api::Evd>,
    target: Arc<MemRegion>,
    tl: Arc<dyn Lmr>,
    src: Arc<MemRegion>,
    sl: Arc<dyn Lmr>,
}

fn end(s: &Side, (ep, evd): EpAndEvd) -> End {
    let target = MemRegion::new(8 << 10);
    let tl = s.pz.register_all(&target, Access::REMOTE_WRITE | Access::LOCAL_WRITE).unwrap();
    let src = MemRegion::new(16 << 10);
    let sl = s.pz.register_all(&src, Access::LOCAL_WRITE).unwrap();
    End { ep, evd, target, tl, src, sl }
}

impl End {
    fn post_recv(&self) {
        let sge = [Sge::new(&*self.sl, RECV_AT, 8)];
        self.ep.post_recv(&sge, Cookie(1), DtoFlags::empty()).unwrap();
    }

    /// Writes `len` bytes starting with `v` into the peer's word 0
    /// (suppressed), with a send of `v` after it when `notify`.
    fn write(&self, peer: &rmr_api::RmrContext, v: u64, notify: bool, len: u64) {
        self.src.store_u64(0, v).unwrap();
        let sge = [Sge::new(&*self.sl, 0, len)];
        self.ep.post_rdma_write(&sge, peer.at(0), Cookie(2), DtoFlags::SUPPRESS).unwrap();
        if notify {
            let sge = [Sge::new(&*self.sl, 0, 8)];
            self.ep.post_send(&sge, Cookie(3), DtoFlags::SUPPRESS).unwrap();
        }
    }

    /// Waits for the next receive; returns its 8 bytes.
    fn recv(&self) -> u64 {
        self.recv_imm().0
    }

    /// Waits for the next receive; returns its 8 bytes and its immediate.
    fn recv_imm(&self) -> (u64, Option<u64>) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.evd.wait(Some(left), 1).expect("an event") {
                Event::Dto(c) if c.cookie == Cookie(1) => {
                    c.result().unwrap();
                    return (self.src.load_u64(RECV_AT).unwrap(), c.imm);
                }
                Event::Dto(c) => c.result().unwrap(),
                Event::Established { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Polls word 0 (no drive of any CQ) until it reads `v`.
    fn sees(&self, v: u64) {
        let deadline = Instant::now() + WAIT;
        while self.target.load_u64(0).unwrap() != v {
            assert!(Instant::now() < deadline, "the write of {v} never landed");
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// A round trip A -> B -> A of write (`len` bytes) + notify: B checks the
/// write landed before its notify, and so does A.
fn round_of(a: &End, b: &End, i: u64, len: u64) {
    let (actx, bctx) = (a.tl.rmr_context(), b.tl.rmr_context());
    a.post_recv();
    b.post_recv();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(b.recv(), 2 * i, "B's notify");
            assert_eq!(b.target.load_u64(0).unwrap(), 2 * i, "A's write before its notify");
            b.write(&actx, 2 * i + 1, true, len);
        });
        a.write(&bctx, 2 * i, true, len);
        assert_eq!(a.recv(), 2 * i + 1, "A's notify");
        assert_eq!(a.target.load_u64(0).unwrap(), 2 * i + 1, "B's write before its notify");
    });
}

#[test]
fn writes_corked_before_their_sends_land_first_and_leave_with_them() {
    let (_s, a, b) = connected(CORKING);
    assert_eq!(counts(&a.ep), Some([0; 4]), "a tcp connection corks");
    for i in 0..300 {
        round(&a, &b, i);
    }
    let [corked, by_post, by_waiter, by_progress] = counts(&a.ep).unwrap();
    println!(
        "A: corked {corked}, by a post {by_post}, by a waiter {by_waiter}, by progress {by_progress}"
    );
    // Each of A's writes follows a wait it just left: nearly all are
    // corked (a round whose post came more than a millisecond after the
    // wait is not), and the send right after sends them.
    assert!(corked >= 1 && by_post >= 1, "A corked {corked}, sent by a post {by_post}");
    // Each of A's corks was undone (by the send after it, or a wait).
    assert_eq!(by_post + by_waiter + by_progress, corked, "a cork left on");
    assert_eq!(spilled(&a.ep), 0, "an 8-byte write and its send share a segment");
    assert!(counts(&b.ep).unwrap()[0] >= 1, "B corks too");
}

/// A round trip A -> B -> A whose first half is a write with immediate
/// of `len` bytes (B checks the immediate and the write's first word) and
/// whose second an 8-byte write + notify.
fn imm_round(a: &End, b: &End, i: u64, len: u64) {
    let (actx, bctx) = (a.tl.rmr_context(), b.tl.rmr_context());
    a.post_recv();
    b.post_recv();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(b.recv_imm().1, Some(i), "B's immediate");
            assert_eq!(b.target.load_u64(0).unwrap(), i, "A's write before its immediate");
            b.write(&actx, i, true, 8);
        });
        a.src.store_u64(0, i).unwrap();
        let sge = [Sge::new(&*a.sl, 0, len)];
        let flags = DtoFlags::SUPPRESS;
        a.ep.post_rdma_write_imm(&sge, bctx.at(0), i as u32, Cookie(2), flags).unwrap();
        assert_eq!(a.recv(), i, "A's notify");
    });
}

/// An IA opened on `spec` and two ends of one connection within it.
fn connected(spec: &str) -> (Side, End, End) {
    let s = side(spec);
    let [pa, pb] = s.pair();
    let (a, b) = (end(&s, pa), end(&s, pb));
    (s, a, b)
}

/// [`round_of`] with 8-byte writes.
fn round(a: &End, b: &End, i: u64) {
    round_of(a, b, i, 8);
}

/// Rounds until A's next lone write is corked; returns that write's value
/// and A's counts just before it (nothing of A's was corked then: the
/// round ended in A's wait).
fn corked_lone_write(a: &End, b: &End, from: u64) -> (u64, [u64; 4]) {
    let (v, n) = lone_write(a, b, from, 0);
    (v, [n[0], n[1], n[3], n[4]])
}

/// Rounds until A's next lone 8-byte write moves A's note number `idx`
/// (0: corked, 6: held); returns that write's value and A's note just
/// before it.
fn lone_write(a: &End, b: &End, from: u64, idx: usize) -> (u64, [u64; 11]) {
    let bctx = b.tl.rmr_context();
    for i in from..from + 50 {
        round(a, b, i);
        let before = note(&a.ep).unwrap();
        let v = 1_000_000 + i;
        a.write(&bctx, v, false, 8);
        if note(&a.ep).unwrap()[idx] > before[idx] {
            return (v, before);
        }
        b.sees(v);
    }
    panic!("no lone write was corked or held in 50 tries");
}

/// Set in the child process that runs a test alone: any drive of an ofi
/// CQ in the process sends what is corked, and so does any CQ's progress
/// thread, so the other tests of this file must not run beside it.
const ALONE: &str = "RMR_TEST_OFI_CORK_ALONE";

/// Outside the child: runs test `name` in a child process of its own and
/// checks that it passed; returns whether it did so (the caller returns).
fn ran_alone(name: &str) -> bool {
    ran_alone_in(name, None)
}

/// [`ran_alone`], the child in network namespace `ns` if given.
fn ran_alone_in(name: &str, ns: Option<&str>) -> bool {
    if std::env::var_os(ALONE).is_some() {
        return false;
    }
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&exe);
            c
        }
        None => std::process::Command::new(&exe),
    };
    let out = cmd
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ALONE, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success() && text.contains("1 passed"), "the child run of {name} failed");
    true
}

#[test]
fn a_lone_corked_write_is_sent_by_a_progress_thread_while_its_poster_sleeps() {
    if ran_alone("a_lone_corked_write_is_sent_by_a_progress_thread_while_its_poster_sleeps") {
        return;
    }
    let (_s, a, b) = connected(CORKING);
    let (v, before) = corked_lone_write(&a, &b, 0);
    // A sleeps; B only loads its memory: a progress thread must send it
    // (the kernel would after 200 ms, uncounted).
    b.sees(v);
    let after = counts(&a.ep).unwrap();
    assert_eq!(after[3], before[3] + 1, "sent by a progress thread: {before:?} -> {after:?}");
    assert_eq!(after[..3], [before[0] + 1, before[1], before[2]], "{before:?} -> {after:?}");
}

#[test]
fn a_lone_corked_write_is_sent_as_its_poster_begins_to_wait() {
    if ran_alone("a_lone_corked_write_is_sent_as_its_poster_begins_to_wait") {
        return;
    }
    // Note numbers: corked, sent by a waiter, by the progress thread.
    lone_write_goes_as_its_poster_waits(CORKING, [0, 3, 4]);
}

/// Lone writes (each moving note number `n[0]`) until one is sent by its
/// poster's wait (moving `n[1]`); each that is not went by the progress
/// thread (`n[2]`), which may wake in the microseconds before the wait.
fn lone_write_goes_as_its_poster_waits(spec: &str, n: [usize; 3]) {
    let (_s, a, b) = connected(spec);
    for t in 0..20 {
        let (v, before) = lone_write(&a, &b, 100 * t, n[0]);
        a.post_recv();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                b.sees(v);
                b.write(&a.tl.rmr_context(), v, true, 8);
            });
            // A waits for B's answer, which B sends only once A's write landed.
            assert_eq!(a.recv(), v);
        });
        let after = note(&a.ep).unwrap();
        if after[n[1]] > before[n[1]] {
            return;
        }
        assert_eq!(
            after[n[2]],
            before[n[2]] + 1,
            "neither the wait nor a progress thread: {after:?}"
        );
    }
    panic!("a progress thread sent the lone write every time");
}

/// A network namespace of its own whose loopback has an Ethernet link's
/// MTU (1500 bytes); removed when dropped.
struct Ns(String);

impl Ns {
    fn new() -> Option<Ns> {
        if !rustix::process::geteuid().is_root() {
            println!("SKIPPED: a network namespace needs root");
            return None;
        }
        let ns = Ns(format!("rmrcork{}", std::process::id()));
        let ip = |args: &[&str]| {
            let st = std::process::Command::new("ip").args(args).status().unwrap();
            assert!(st.success(), "ip {args:?}");
        };
        let made = std::process::Command::new("ip").args(["netns", "add", &ns.0]).status();
        if !made.is_ok_and(|st| st.success()) {
            println!("SKIPPED: `ip netns add` failed here (no CAP_SYS_ADMIN or no ip(8))");
            return None;
        }
        ip(&["netns", "exec", &ns.0, "ip", "link", "set", "lo", "mtu", "1500", "up"]);
        Some(ns)
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn on_an_ethernet_mtu_only_writes_that_share_one_segment_with_their_send_are_corked() {
    let name = "on_an_ethernet_mtu_only_writes_that_share_one_segment_with_their_send_are_corked";
    if std::env::var_os(ALONE).is_none() {
        if let Some(ns) = Ns::new() {
            ran_alone_in(name, Some(&ns.0));
        }
        return;
    }
    let (_s, a, b) = connected(CORKING);
    // Corked data that spills into a second segment is sent late on a
    // shaped link: the largest write corked leaves room in one segment.
    let max = cork_max(&a.ep);
    assert!(max > 0 && max + 256 < 1448, "writes up to {max} bytes corked at MTU 1500");
    let corked = |ep: &Arc<dyn Ep>| counts(ep).unwrap()[0];
    for i in 0..20 {
        round_of(&a, &b, i, 4096);
        round_of(&a, &b, 100 + i, max + 1);
    }
    assert_eq!(corked(&a.ep), 0, "writes over {max} bytes are never corked here");
    for i in 200..300 {
        round_of(&a, &b, i, 8);
    }
    let before = corked(&a.ep);
    assert!(before >= 1, "8-byte writes are corked");
    for i in 300..400 {
        round_of(&a, &b, i, max);
    }
    assert!(corked(&a.ep) > before, "{max}-byte writes are corked");
    // A write with immediate is announced by a send of its own: one
    // segment with the write too, never sent ahead of it.
    let before = corked(&a.ep);
    for i in 2000..2100 {
        imm_round(&a, &b, i, max);
    }
    assert!(corked(&a.ep) > before, "writes with immediate are corked");
    assert_eq!(spilled(&a.ep), 0, "a corked write sent ahead of its own announcement");
}

#[test]
fn the_sockets_provider_and_cork_max_0_never_cork() {
    for spec in ["ofi:sockets:127.0.0.1", "ofi:tcp:127.0.0.1;cork_max=0"] {
        let (_s, a, b) = connected(spec);
        for i in 0..20 {
            round(&a, &b, i);
        }
        assert_eq!(counts(&a.ep), None, "{spec}");
        assert_eq!(counts(&b.ep), None, "{spec}");
    }
}

#[test]
fn small_writes_are_held_and_ride_in_their_sends() {
    let (_s, a, b) = connected(HOLDING);
    assert_eq!(held(&a.ep), [0; 5]);
    // `round` checks each write is in place when its send completes.
    for i in 0..300 {
        round(&a, &b, i);
    }
    let [h, rode, by_post, by_waiter, by_progress] = held(&a.ep);
    println!(
        "A: held {h}, rode {rode}, alone by a post {by_post}, a waiter {by_waiter}, progress {by_progress}"
    );
    // As for corking: nearly all of A's writes follow a wait it just left.
    assert!(h >= 1 && rode >= 1, "A held {h}, of which rode in a send {rode}");
    assert_eq!(rode + by_post + by_waiter + by_progress, h, "a held write left no trace");
    assert_eq!(counts(&a.ep).unwrap()[0], 0, "an 8-byte write was corked, not held");
    assert!(held(&b.ep)[1] >= 1, "B's writes ride too");
}

#[test]
fn a_lone_held_write_is_posted_by_a_progress_thread_while_its_poster_sleeps() {
    if ran_alone("a_lone_held_write_is_posted_by_a_progress_thread_while_its_poster_sleeps") {
        return;
    }
    let (_s, a, b) = connected(HOLDING);
    lone_held_write_goes_by_a_progress_thread(&a, &b, 0);
}

/// Rounds from `from` until A's next lone write is held; A then sleeps and
/// B only loads its memory: a progress thread must post it.
fn lone_held_write_goes_by_a_progress_thread(a: &End, b: &End, from: u64) {
    let (v, before) = lone_write(a, b, from, 6);
    b.sees(v);
    let after = note(&a.ep).unwrap();
    assert_eq!(after[10], before[10] + 1, "posted by a progress thread: {before:?} -> {after:?}");
    assert_eq!(after[6..10], [before[6] + 1, before[7], before[8], before[9]], "{after:?}");
}

/// The passes of the progress thread of the EP's receive CQ so far (its
/// `ofi.progress` note: each wake-up, and each read in a row while it
/// drives).
fn passes(ep: &Arc<dyn Ep>) -> u64 {
    let n = ep.attr().note("ofi.progress").expect("an ofi.progress note").to_string();
    n.strip_suffix(" passes").and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("{n:?}"))
}

#[test]
fn progress_threads_nap_longer_beside_a_ping_pong_and_still_send_a_lone_write() {
    if ran_alone("progress_threads_nap_longer_beside_a_ping_pong_and_still_send_a_lone_write") {
        return;
    }
    let (_s, a, b) = connected(HOLDING);
    let before = [passes(&a.ep), passes(&b.ep)];
    let (start, mut i) = (Instant::now(), 0);
    while start.elapsed() < Duration::from_millis(500) {
        round(&a, &b, i);
        i += 1;
    }
    let ms = start.elapsed().as_millis() as u64;
    let woke = [passes(&a.ep) - before[0], passes(&b.ep) - before[1]];
    // Looking every millisecond, each would have passed about `ms` times
    // (458 and 459 in a run with naps kept at 1 ms; 35-40 growing). B's
    // waiter is a new thread each round, and on a loaded host late enough
    // now and then for B's thread to take B's CQ over (67-117 beside the
    // file's other cases, up to 409 beside three busy loops): only A's,
    // whose waiter is this thread, is held to the growing naps.
    let why = format!("{woke:?} passes in {ms} ms ({i} round trips)");
    assert!(woke[0] < ms / 3, "A's progress thread: {why}");
    assert!(woke[1] < ms, "B's progress thread: {why}");
    // With their naps grown, a lone write whose poster then sleeps is still
    // posted by a progress thread, and B's takes B's CQ over to place it.
    lone_held_write_goes_by_a_progress_thread(&a, &b, i);
}

#[test]
fn a_progress_thread_sleeps_through_long_waits() {
    if ran_alone("a_progress_thread_sleeps_through_long_waits") {
        return;
    }
    let (_s, a, b) = connected(HOLDING);
    let actx = a.tl.rmr_context();
    round(&a, &b, 0);
    let before = passes(&a.ep);
    const WAITS: u64 = 15;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=WAITS {
                std::thread::sleep(Duration::from_millis(30));
                b.write(&actx, i, true, 8);
            }
        });
        for i in 1..=WAITS {
            a.post_recv();
            assert_eq!(a.recv(), i, "B's notify");
        }
    });
    // Through a wait's first milliseconds the thread looks every
    // millisecond, then sleeps until the waiter leaves and kicks it: about
    // ten passes for the first wait. After a long wait, one look that finds
    // the next one going on is enough (it was ten for every wait until the
    // thread kept its count across a kick that came before the waiter was
    // back: 150 passes here then, 39 now).
    let n = passes(&a.ep) - before;
    assert!(n < 5 * WAITS, "{n} passes of A's progress thread over {WAITS} waits of 30 ms");
}

#[test]
fn a_lone_held_write_is_posted_as_its_poster_begins_to_wait() {
    if ran_alone("a_lone_held_write_is_posted_as_its_poster_begins_to_wait") {
        return;
    }
    // Note numbers: held, posted alone by a waiter, by the progress thread.
    lone_write_goes_as_its_poster_waits(HOLDING, [6, 9, 10]);
}

#[test]
fn small_writes_with_immediate_ride_in_their_own_message() {
    let (_s, a, b) = connected(HOLDING);
    // `imm_round` checks the immediate and that the write is in place.
    for i in 0..50 {
        imm_round(&a, &b, i, 8);
    }
    assert_eq!(counts(&a.ep).unwrap()[0], 0, "an 8-byte write with immediate was corked");
    // A larger one is a write of its own (corked) before its message.
    for i in 50..60 {
        imm_round(&a, &b, i, 4096);
    }
}
