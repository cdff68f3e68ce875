//! Lab tests in the zipper layout (scripts/lab.sh zipper): cluster A's
//! host, zipper node(s) with IP forwarding off, cluster B's host — so only
//! a bridge can carry traffic between the clusters. Each test builds its
//! lab, runs `rmr-bridge` on the zipper node(s) and this test binary as
//! cluster processes in the cluster namespaces, and tears the lab down
//! afterwards, pass or fail. Needs root (as CI has).

use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, Event, MemRegion, RmrContext, Sge};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zipper_bridge::{JoinConfig, Peer, World, WorldDesc};

const ROLE: &str = "ZIP_LAB_ROLE";
static SERIAL: Mutex<()> = Mutex::new(());

fn lab_script() -> String {
    format!("{}/../scripts/lab.sh", env!("CARGO_MANIFEST_DIR"))
}

/// A lab (and a scratch directory) that remove themselves when dropped.
struct Lab {
    prefix: &'static str,
    dir: String,
    kids: Vec<Child>,
}

impl Lab {
    fn zipper(prefix: &'static str, bridges: usize, rate: &str) -> Lab {
        let out = Command::new("bash")
            .args([&lab_script(), "zipper", prefix, &bridges.to_string(), rate, rate])
            .output()
            .expect("run lab.sh");
        assert!(out.status.success(), "lab.sh zipper: {}", String::from_utf8_lossy(&out.stderr));
        let dir = format!("/tmp/zipper-lab-{prefix}-{}", std::process::id());
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Lab { prefix, dir, kids: Vec::new() }
    }

    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    fn bridge(&mut self, world: &str, k: usize, extra: &[&str]) -> usize {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(&format!("z{k}")), env!("CARGO_BIN_EXE_rmr-bridge")])
            .args(["--world", world, "--bridge", &k.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.kids.push(c.spawn().expect("spawn rmr-bridge"));
        self.kids.len() - 1
    }

    fn tx_bytes(&self, ns: &str, dev: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns(ns), "cat"])
            .arg(format!("/sys/class/net/{}{dev}/statistics/tx_bytes", self.prefix))
            .output()
            .expect("counters");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        let _ = Command::new("bash").args([&lab_script(), "down", self.prefix]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

/// Runs this test binary's test `name` in namespace `ns` as a cluster process.
fn spawn_role(ns: &str, name: &str, env: &[(&str, String)]) -> Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(std::env::current_exe().expect("test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, "1")
        // Generous by default: a rank that the 2-CPU host does not run for
        // a moment leaves its peers' data unacknowledged (a zero window),
        // and the user timeout would end a healthy connection. The test
        // that kills a bridge sets its own.
        .env("RMR_TCP_USER_TIMEOUT_MS", "20000")
        // Direct (TCP) sends wait this long for a receive: processes start unevenly.
        .env("RMR_TCP_RNR_TIMEOUT_MS", "60000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn role")
}

fn finish(child: Child, what: &str) -> String {
    let out: Output = child.wait_with_output().expect("wait");
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{what} failed:\n{s}\n{}", String::from_utf8_lossy(&out.stderr));
    s
}

fn checksum(b: &[u8]) -> u64 {
    b.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} unset"))
}

fn next_dto(p: &Peer) -> rmr_api::DtoCompletion {
    loop {
        let ev = p.evd.wait(Some(Duration::from_secs(20)), 1);
        let ev =
            ev.unwrap_or_else(|e| panic!("{e}: rank {} notes {:?}", p.rank, p.ep.attr().notes));
        match ev {
            Event::Dto(c) => return c,
            Event::RailDown { rail, reason, .. } => println!("RESULT rail_down={rail} ({reason})"),
            e => println!("event {e:?}"),
        }
    }
}

/// Asserts a completion succeeded; otherwise panics with why the EP ended
/// (its `Broken` event's reason, when one follows) and its notes.
fn ok(p: &Peer, c: rmr_api::DtoCompletion) {
    if c.result().is_ok() {
        return;
    }
    let mut why = String::new();
    while let Ok(ev) = p.evd.wait(Some(Duration::from_millis(500)), 1) {
        if let Event::Broken { reason, .. } = ev {
            why = reason;
            break;
        }
    }
    panic!("{c:?} on rank {}: broken ({why}); notes {:?}", p.rank, p.ep.attr().notes);
}

/// Swaps RMR contexts of `region` with the peer (both sides call it).
fn swap_ctx(p: &Peer, mine: RmrContext) -> RmrContext {
    let rb = MemRegion::new(128);
    let rl = p.pz.register_all(&rb, Access::LOCAL_WRITE).unwrap();
    p.ep.post_recv(&[Sge::whole(&*rl)], Cookie(9000), DtoFlags::empty()).unwrap();
    let sb = MemRegion::from_bytes(&mine.to_bytes());
    let sl = p.pz.register_all(&sb, Access::empty()).unwrap();
    p.ep.post_send(&[Sge::whole(&*sl)], Cookie(9001), DtoFlags::SUPPRESS).unwrap();
    let c = next_dto(p);
    assert_eq!(c.cookie.0, 9000, "{c:?}");
    ok(p, c);
    RmrContext::from_bytes(&rb.to_vec(0, RmrContext::WIRE_SIZE).unwrap()).unwrap()
}

const ORDERED: u64 = 48;
const SLOT: u64 = 256 << 10;

/// Both directions at once with `p`: ordered write+send pairs (every send
/// must arrive in order and find the write before it landed), a large send,
/// and an RDMA read back of what was written — all checked with checksums.
fn exchange(p: &Peer, me: u32) {
    let target = MemRegion::new((ORDERED * SLOT) as usize);
    let tl = p.pz.register_all(&target, Access::ALL).unwrap();
    let theirs = swap_ctx(p, tl.rmr_context());
    // Receives for the ordered notes and one 3 MiB message.
    let notes = MemRegion::new((ORDERED * 64) as usize);
    let nl = p.pz.register_all(&notes, Access::LOCAL_WRITE).unwrap();
    for k in 0..ORDERED {
        p.ep.post_recv(&[Sge::new(&*nl, k * 64, 64)], Cookie(k), DtoFlags::empty()).unwrap();
    }
    const BIG: usize = 3 << 20;
    let big_in = MemRegion::new(BIG);
    let bl = p.pz.register_all(&big_in, Access::LOCAL_WRITE).unwrap();
    p.ep.post_recv(&[Sge::whole(&*bl)], Cookie(500), DtoFlags::empty()).unwrap();
    // Send side: the data, then a note naming it.
    let mut sent = Vec::new();
    let src = MemRegion::new((ORDERED * SLOT) as usize);
    let sl = p.pz.register_all(&src, Access::empty()).unwrap();
    let note = MemRegion::new((ORDERED * 64) as usize);
    let notel = p.pz.register_all(&note, Access::empty()).unwrap();
    for k in 0..ORDERED {
        let len = 1 + (k * 7919 + u64::from(me) * 104_729) % SLOT;
        let data = pattern(u64::from(me) * 1000 + k, len as usize);
        src.write(k * SLOT, &data).unwrap();
        let mut n = [0u8; 24];
        n[..8].copy_from_slice(&k.to_le_bytes());
        n[8..16].copy_from_slice(&len.to_le_bytes());
        n[16..24].copy_from_slice(&checksum(&data).to_le_bytes());
        note.write(k * 64, &n).unwrap();
        sent.push(data);
        p.ep.post_rdma_write(
            &[Sge::new(&*sl, k * SLOT, len)],
            theirs.at(k * SLOT),
            Cookie(1000 + k),
            DtoFlags::SUPPRESS,
        )
        .unwrap();
        p.ep.post_send(&[Sge::new(&*notel, k * 64, 24)], Cookie(2000 + k), DtoFlags::SUPPRESS)
            .unwrap();
    }
    let big = pattern(u64::from(me) + 77, BIG);
    let bsrc = MemRegion::from_bytes(&big);
    let bsl = p.pz.register_all(&bsrc, Access::empty()).unwrap();
    p.ep.post_send(&[Sge::whole(&*bsl)], Cookie(3000), DtoFlags::empty()).unwrap();
    // Receive side: notes in order, each finding its data already in place.
    let (mut next, mut big_ok, mut sent_ok) = (0u64, false, false);
    while next < ORDERED || !big_ok || !sent_ok {
        let c = next_dto(p);
        c.result().unwrap_or_else(|e| panic!("{c:?}: {e}"));
        match c.cookie.0 {
            k if k < ORDERED => {
                assert_eq!(k, next, "receives complete in posting order");
                let n = notes.to_vec(k * 64, 24).unwrap();
                let u = |o: usize| u64::from_le_bytes(n[o..o + 8].try_into().unwrap());
                assert_eq!(u(0), k, "note {k} carries its own sequence number");
                let got = target.to_vec(k * SLOT, u(8) as usize).unwrap();
                assert_eq!(checksum(&got), u(16), "write {k} visible before its note (rule 2)");
                next += 1;
            }
            500 => {
                assert_eq!(c.bytes, BIG as u64);
                assert_eq!(
                    checksum(&big_in.to_vec(0, BIG).unwrap()),
                    checksum(&pattern(u64::from(p.rank) + 77, BIG))
                );
                big_ok = true;
            }
            3000 => sent_ok = true,
            other => panic!("unexpected completion {other}: {c:?}"),
        }
    }
    // Everything I wrote has landed (the signalled send after it completed): read it back.
    let back = MemRegion::new((ORDERED * SLOT) as usize);
    let bkl = p.pz.register_all(&back, Access::LOCAL_WRITE).unwrap();
    p.ep.post_rdma_read(&[Sge::whole(&*bkl)], theirs.at(0), Cookie(4000), DtoFlags::empty())
        .unwrap();
    let c = next_dto(p);
    assert_eq!(c.cookie.0, 4000);
    ok(p, c);
    for (k, d) in sent.iter().enumerate() {
        let got = back.to_vec(k as u64 * SLOT, d.len()).unwrap();
        assert_eq!(checksum(&got), checksum(d), "read back slot {k}");
    }
    // Let the peer finish reading before the region goes away.
    swap_ctx(p, tl.rmr_context());
}

fn world_text(bridges: usize, procs: &[(&str, &[&str], u16)]) -> String {
    let mut s = String::from("[[cluster]]\nname = \"A\"\n[[cluster]]\nname = \"B\"\n");
    for k in 0..bridges {
        s += &format!(
            "[[bridge]]\na = \"198.18.{}.2\"\nb = \"198.18.{}.1\"\nport = 7700\n",
            10 + k,
            20 + k
        );
    }
    for (r, (c, addrs, port)) in procs.iter().enumerate() {
        let a: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
        s += &format!(
            "[[process]]\nrank = {r}\ncluster = \"{c}\"\naddrs = [{}]\nport = {port}\n",
            a.join(", ")
        );
    }
    s
}

/// One bridge, two processes in each cluster: cross-cluster send/recv, RDMA
/// write and read with checksums in both directions at once, the ordering
/// rules end to end, direct traffic inside each cluster, and a tight
/// barrier over all four (entry counters, not timing).
#[test]
fn zipper_lab_transfers_ordering_and_barrier() {
    if std::env::var_os(ROLE).is_some() {
        return worker_transfers();
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(is_root(), "lab tests need root for network namespaces");
    let mut lab = Lab::zipper("zt1", 1, "none");
    let a = ["198.18.10.1"];
    let b = ["198.18.20.2"];
    let world = format!("{}/world.toml", lab.dir);
    std::fs::write(
        &world,
        world_text(1, &[("A", &a, 7800), ("A", &a, 7810), ("B", &b, 7800), ("B", &b, 7810)]),
    )
    .unwrap();
    WorldDesc::load(&world).expect("valid world");
    let bi = lab.bridge(&world, 0, &[]);
    let t0 = Instant::now();
    let kids: Vec<Child> = (0..4)
        .map(|r| {
            let ns = lab.ns(if r < 2 { "ca" } else { "cb" });
            spawn_role(
                &ns,
                "zipper_lab_transfers_ordering_and_barrier",
                &[
                    ("ZIP_RANK", r.to_string()),
                    ("ZIP_WORLD", world.clone()),
                    ("ZIP_DIR", lab.dir.clone()),
                ],
            )
        })
        .collect();
    let outs: Vec<Output> = kids.into_iter().map(|k| k.wait_with_output().expect("wait")).collect();
    for (r, o) in outs.iter().enumerate() {
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && s.contains("RESULT ok"),
            "rank {r} failed:\n{s}\n{}\nall: {:?}",
            String::from_utf8_lossy(&o.stderr),
            outs.iter()
                .map(|o| String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .filter(|l| l.contains("panicked") || l.contains("notes"))
                    .map(String::from)
                    .collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
    }
    println!("4 processes done in {:?}", t0.elapsed());
    // The bridge stops cleanly on SIGTERM and says so.
    let mut br = lab.kids.remove(bi);
    let _ = Command::new("kill").args(["-TERM", &br.id().to_string()]).status();
    let t = Instant::now();
    while br.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = br.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bridge exit: {err}");
    assert!(err.contains("a->b thread: core"), "binding in the status line: {err}");
    assert!(err.contains("rmr-bridge: stopped; 0 connection(s) still busy"), "{err}");
}

fn worker_transfers() {
    let rank: u32 = env("ZIP_RANK").parse().unwrap();
    let dir = env("ZIP_DIR");
    let desc = WorldDesc::load(env("ZIP_WORLD")).unwrap();
    let world = World::join(desc, rank, JoinConfig::from_env().unwrap()).expect("join");
    let partner = (rank + 2) % 4;
    let neighbour = rank ^ 1;
    // Cross-cluster, both directions at once.
    let p = world.ep(partner).expect("bridged ep");
    assert!(p.bridged);
    exchange(&p, rank);
    // Direct inside the cluster.
    let n = world.ep(neighbour).expect("direct ep");
    assert!(!n.bridged);
    let target = MemRegion::new(1 << 20);
    let tl = n.pz.register_all(&target, Access::ALL).unwrap();
    let theirs = swap_ctx(&n, tl.rmr_context());
    // Receive the peer's note first: a TCP stream holds what follows a send until its receive exists.
    let nb = MemRegion::new(8);
    let nbl = n.pz.register_all(&nb, Access::LOCAL_WRITE).unwrap();
    n.ep.post_recv(&[Sge::whole(&*nbl)], Cookie(9100), DtoFlags::empty()).unwrap();
    let data = pattern(u64::from(rank) + 5, 1 << 20);
    let src = MemRegion::from_bytes(&data);
    let sl = n.pz.register_all(&src, Access::empty()).unwrap();
    n.ep.post_rdma_write(&[Sge::whole(&*sl)], theirs.at(0), Cookie(1), DtoFlags::empty()).unwrap();
    n.ep.post_send(&[Sge::new(&*sl, 0, 8)], Cookie(9101), DtoFlags::SUPPRESS).unwrap();
    let (mut wrote, mut noted) = (false, false);
    while !(wrote && noted) {
        let c = next_dto(&n);
        ok(&n, c);
        wrote |= c.cookie == 1;
        noted |= c.cookie == 9100;
    }
    assert_eq!(
        checksum(&target.to_vec(0, 1 << 20).unwrap()),
        checksum(&pattern(u64::from(neighbour) + 5, 1 << 20))
    );
    // A tight barrier: nobody leaves round i before everybody entered it.
    let size = world.size() as u32;
    for i in 1..=25u64 {
        // Written whole (rename), so a reader never sees a half-written count.
        std::fs::write(format!("{dir}/tmp.{rank}"), i.to_string()).unwrap();
        std::fs::rename(format!("{dir}/tmp.{rank}"), format!("{dir}/entered.{rank}")).unwrap();
        std::thread::sleep(Duration::from_micros(((u64::from(rank) * 7 + i * 13) % 5) * 700));
        if let Err(e) = world.barrier() {
            // Every endpoint's counts and progress state, for whoever reads
            // the failure: which message did not arrive, and where it stopped.
            for r in (0..size).filter(|&r| r != rank) {
                if let Ok(p) = world.ep(r) {
                    eprintln!("notes rank {rank} -> {r} at barrier {i}: {:?}", p.ep.attr().notes);
                }
            }
            panic!("barrier {i}: {e:?}");
        }
        for r in 0..size {
            let e: u64 = std::fs::read_to_string(format!("{dir}/entered.{r}"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            assert!(e >= i, "rank {rank} left barrier {i} before rank {r} entered it (at {e})");
        }
    }
    // Like MPI_Finalize: nobody tears its connections down while a peer may
    // still be reading its last barrier message.
    let fin = world.barrier();
    // Every endpoint's flow-control and progress state, for the record (and
    // for whoever reads a failure).
    for r in (0..size).filter(|&r| r != rank) {
        if let Ok(p) = world.ep(r) {
            eprintln!("notes rank {rank} -> {r}: {:?}", p.ep.attr().notes);
        }
    }
    fin.expect("final barrier");
    std::thread::sleep(Duration::from_millis(300));
    println!("RESULT ok rank={rank}");
}

/// Two bridges: one 64 MiB RDMA write striped over both with the multirail
/// planner; bridge 1 is killed mid-transfer; the write still completes
/// intact through bridge 0 (multirail failover), and the loss is reported.
#[test]
fn zipper_lab_two_bridges_one_killed_mid_transfer() {
    if std::env::var_os(ROLE).is_some() {
        return worker_failover();
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(is_root(), "lab tests need root for network namespaces");
    let mut lab = Lab::zipper("zt2", 2, "300mbit");
    let world = format!("{}/world.toml", lab.dir);
    std::fs::write(
        &world,
        world_text(
            2,
            &[
                ("A", &["198.18.10.1", "198.18.11.1"], 7800),
                ("B", &["198.18.20.2", "198.18.21.2"], 7800),
            ],
        ),
    )
    .unwrap();
    lab.bridge(&world, 0, &[]);
    let b1 = lab.bridge(&world, 1, &[]);
    // A bridge that dies silently is found within 1.5 s (a killed one
    // resets its connections at once).
    let env = [
        ("ZIP_WORLD", world.clone()),
        ("ZIP_DIR", lab.dir.clone()),
        ("RMR_TCP_USER_TIMEOUT_MS", "1500".to_string()),
    ];
    let server = spawn_role(
        &lab.ns("cb"),
        "zipper_lab_two_bridges_one_killed_mid_transfer",
        &[("ZIP_RANK", "1".into()), env[0].clone(), env[1].clone(), env[2].clone()],
    );
    let client = spawn_role(
        &lab.ns("ca"),
        "zipper_lab_two_bridges_one_killed_mid_transfer",
        &[("ZIP_RANK", "0".into()), env[0].clone(), env[1].clone(), env[2].clone()],
    );
    // Kill bridge 1 once a quarter of the transfer has crossed its A link.
    let started = format!("{}/started", lab.dir);
    let t = Instant::now();
    while !std::path::Path::new(&started).exists() && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let base = lab.tx_bytes("ca", "ca1");
    while lab.tx_bytes("ca", "ca1") < base + (8 << 20) && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let carried = lab.tx_bytes("ca", "ca1") - base;
    lab.kids[b1].kill().expect("kill bridge 1");
    let c = finish(client, "client");
    let s = finish(server, "server");
    assert!(carried >= 8 << 20, "bridge 1 carried {carried} bytes before the kill");
    assert!(c.contains("RESULT write=ok"), "{c}");
    assert!(c.contains("RESULT rail_down=1"), "the loss of bridge 1 is reported:\n{c}");
    assert!(s.contains("RESULT intact=1"), "{s}");
}

const BIG: usize = 64 << 20;

fn worker_failover() {
    let rank: u32 = env("ZIP_RANK").parse().unwrap();
    let dir = env("ZIP_DIR");
    let desc = WorldDesc::load(env("ZIP_WORLD")).unwrap();
    let mut cfg = JoinConfig::from_env().unwrap();
    cfg.multirail.bind = false;
    let world = World::join(desc, rank, cfg).expect("join");
    let p = world.ep(1 - rank).expect("ep over two bridges");
    if rank == 1 {
        let target = MemRegion::new(BIG);
        let tl = p.pz.register_all(&target, Access::ALL).unwrap();
        swap_ctx(&p, tl.rmr_context());
        // The client says when its write has completed.
        swap_ctx(&p, tl.rmr_context());
        let ok = checksum(&target.to_vec(0, BIG).unwrap()) == checksum(&pattern(99, BIG));
        println!("RESULT intact={}", u8::from(ok));
    } else {
        let theirs = swap_ctx(&p, RmrContext::new(0, 0, 0));
        let src = MemRegion::from_bytes(&pattern(99, BIG));
        let sl = p.pz.register_all(&src, Access::empty()).unwrap();
        p.ep.post_rdma_write(&[Sge::whole(&*sl)], theirs.at(0), Cookie(7), DtoFlags::empty())
            .unwrap();
        std::fs::write(format!("{dir}/started"), b"1").unwrap();
        let c = next_dto(&p);
        assert_eq!(c.cookie.0, 7);
        c.result().expect("the striped write survives the loss of a bridge");
        println!("RESULT write=ok");
        // Drain the rail-loss report if it came after the completion.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Event::RailDown { rail, reason, .. }) =
                p.evd.wait(Some(Duration::from_millis(200)), 1)
            {
                println!("RESULT rail_down={rail} ({reason})");
                break;
            }
        }
        swap_ctx(&p, RmrContext::new(0, 0, 0));
    }
}
