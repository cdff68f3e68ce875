//! The chaos soak: a multirail endpoint over three shaped lab rails
//! (scripts/lab.sh) carrying checked rounds while the parent cuts rails,
//! heals them and changes their rates at random moments.
//!
//! A round writes a fresh pattern of random length into one of 8 slots of
//! the server's region and sends a notify carrying its checksum. The server
//! checks the slot and answers its verdict. Every fourth round the client
//! reads the slot back and checks it too.
//!
//! A rail cut for longer than the TCP user timeout (1.5 s here) is lost to
//! its endpoint, which goes on with the survivors; a healed rail rejoins.
//! An endpoint that loses every rail at once breaks; the client then
//! connects again (the parent heals every rail for that) and goes on.
//!
//! What must hold, whatever the faults (CI's short run and the campaign
//! assert the same):
//! - a connection ends only with its last rail: no DTO fails, and no
//!   break comes, while a rail survives (it caught receives flushed by a
//!   lost rail and handed to the user before the rail's end was handled);
//! - every completed round verified by the server and, where read back, by
//!   the client (0 mismatches);
//! - every posted DTO completes exactly once (success, or flushed by a
//!   break), none lost;
//! - RSS flat after the warm-up (both processes);
//! - the run ends by itself.
//!
//! The client sends stripes of 64 KiB and more with `MSG_ZEROCOPY`, the
//! rest copied.
//!
//! `RMR_TEST_CHAOS_SECS` (default 60) sets the length,
//! `RMR_TEST_CHAOS_SEED` the faults' seed (printed), and
//! `RMR_TEST_CHAOS_PREFIX` the lab's name (default `rmrch`);
//! `scripts/chaos-soak.sh` runs the 10-minute campaign.

#[path = "support/lab.rs"]
mod lab;
use lab::*;

use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, Evd, Event, Ia, MemRegion, RmrContext, Sge};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RAILS_A: &str = "tcp:198.18.0.1,tcp:198.18.1.1,tcp:198.18.2.1";
const RAILS_B: &str = "tcp:198.18.0.2,tcp:198.18.1.2,tcp:198.18.2.2";
const REMOTE: &str = "198.18.0.2,198.18.1.2,198.18.2.2";
const SERVICE: u16 = 7650;
const SLOTS: u64 = 8;
const SLOT: u64 = 256 << 10;
/// A notify: slot, checksum, length (u64::MAX: the client is done).
const NOTE: u64 = 24;
const NAME: &str = "lab_chaos_soak_rails_cut_healed_and_reshaped";

fn secs() -> u64 {
    std::env::var("RMR_TEST_CHAOS_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

fn open(rails: &str) -> Arc<dyn Ia> {
    backend_tcp::register();
    multirail::register();
    rmr_api::open(&format!("multirail:{rails};engine=pinned;policy=even;threshold=8K"))
        .expect("open multirail")
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The server: accepts connections one after another and checks every
/// notified slot, until the client says it is done.
fn server() {
    let ia = open(RAILS_B);
    let pz = ia.create_pz().unwrap();
    let pevd = ia.create_evd().unwrap();
    let target = MemRegion::new((SLOTS * SLOT) as usize);
    let tl = pz.register_all(&target, Access::ALL).unwrap();
    let notes = MemRegion::new((SLOTS * NOTE) as usize);
    let nl = pz.register_all(&notes, Access::LOCAL_WRITE).unwrap();
    let verdicts = MemRegion::new((SLOTS * 8) as usize);
    let vl = pz.register_all(&verdicts, Access::empty()).unwrap();
    let _psp = ia.create_psp(SERVICE, &pevd).unwrap();
    println!("RESULT listening=1");
    let (mut verified, mut bad, mut conns, mut rails_lost, mut early) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    // Notifies delivered twice (a failover re-sent a send that had arrived).
    let mut duplicates = 0u64;
    let (mut rss_start, t0) = (0, Instant::now());
    let deadline = Instant::now() + Duration::from_secs(secs() + 180);
    'serve: while Instant::now() < deadline {
        let Ok(Event::ConnectionRequest(cr)) = pevd.wait(Some(Duration::from_secs(1)), 1) else {
            continue;
        };
        let evd = ia.create_evd().unwrap();
        let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
        if cr.accept(&ep, &tl.rmr_context().to_bytes()).is_err() {
            continue;
        }
        conns += 1;
        // Each slot's last notify (a second one with the same checksum is
        // a duplicate delivery).
        let mut seen = [(0u64, 0u64); SLOTS as usize];
        for s in 0..SLOTS {
            let _ = ep.post_recv(&[Sge::new(&*nl, s * NOTE, NOTE)], Cookie(s), DtoFlags::empty());
        }
        loop {
            if rss_start == 0 && t0.elapsed() > Duration::from_secs(5) {
                rss_start = rss_kib();
            }
            match evd.wait(Some(Duration::from_secs(1)), 1) {
                Ok(Event::Dto(c)) if c.status.is_ok() && c.op == rmr_api::DtoOp::Recv => {
                    let s = c.cookie.0;
                    let slot = notes.load_u64(s * NOTE).unwrap();
                    let (sum, len) = (
                        notes.load_u64(s * NOTE + 8).unwrap(),
                        notes.load_u64(s * NOTE + 16).unwrap(),
                    );
                    if len == u64::MAX {
                        break 'serve;
                    }
                    if slot < SLOTS && seen[slot as usize] == (sum, len) {
                        println!("LIVE server: notify for slot {slot} twice (sum {sum:#x})");
                        duplicates += 1;
                    }
                    if slot < SLOTS {
                        seen[slot as usize] = (sum, len);
                    }
                    let ok = slot < SLOTS
                        && len <= SLOT
                        && checksum(&target.to_vec(slot * SLOT, len as usize).unwrap()) == sum;
                    verified += 1;
                    bad += u64::from(!ok);
                    verdicts.store_u64(s * 8, u64::from(ok)).unwrap();
                    let _ = ep.post_recv(
                        &[Sge::new(&*nl, s * NOTE, NOTE)],
                        Cookie(s),
                        DtoFlags::empty(),
                    );
                    let _ = ep.post_send(
                        &[Sge::new(&*vl, s * 8, 8)],
                        Cookie(100 + s),
                        DtoFlags::empty(),
                    );
                }
                Ok(Event::Dto(c)) if c.status.is_ok() => {}
                Ok(e @ (Event::Dto(_) | Event::Broken { .. } | Event::Disconnected { .. })) => {
                    println!("LIVE server: {e:?} (state {:?})", ep.state());
                    if matches!(e, Event::Dto(_)) && ep.state() == rmr_api::EpState::Connected {
                        early += 1; // a failed DTO on an EP that still has rails
                    }
                    break;
                }
                Ok(Event::RailDown { .. }) => rails_lost += 1,
                _ => {}
            }
        }
    }
    println!(
        "RESULT server verified={verified} bad={bad} connections={conns} rails_lost={rails_lost}"
    );
    println!("RESULT server_rss_kib={rss_start},{}", rss_kib());
    println!("RESULT bad={bad}");
    println!("RESULT server_early_errors={early}");
    println!("RESULT server_duplicates={duplicates}");
}

/// One connection of the client's: its EP, EVD, and the DTOs in flight.
struct Conn {
    ep: Arc<dyn Ep>,
    evd: Arc<dyn Evd>,
    ctx: RmrContext,
    /// Cookie -> (slot, what): every posted DTO until it completes.
    posted: HashMap<u64, (u64, u8)>,
}

const WRITE: u8 = 0;
const NOTIFY: u8 = 1;
const VERDICT: u8 = 2;
const READ: u8 = 3;

fn connect(ia: &Arc<dyn Ia>, pz: &Arc<dyn rmr_api::Pz>) -> Conn {
    let start = Instant::now();
    loop {
        let evd = ia.create_evd().unwrap();
        let ep = ia.create_ep(pz, &EpEvds::single(&evd)).unwrap();
        match ep.connect(REMOTE, SERVICE, b"", Duration::from_secs(5)) {
            Ok(pd) => {
                let ctx = RmrContext::from_bytes(&pd).unwrap();
                return Conn { ep, evd, ctx, posted: HashMap::new() };
            }
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(90), "connect: {e}");
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }
}

/// The client: keeps a round in flight in every slot, reconnects after a
/// break, then says it is done and prints its tally.
fn client() {
    let ia = open(RAILS_A);
    let pz = ia.create_pz().unwrap();
    let src = MemRegion::new((SLOTS * SLOT) as usize);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let back = MemRegion::new((SLOTS * SLOT) as usize);
    let bl = pz.register_all(&back, Access::LOCAL_WRITE).unwrap();
    let notes = MemRegion::new((SLOTS * NOTE) as usize);
    let nl = pz.register_all(&notes, Access::empty()).unwrap();
    let verdicts = MemRegion::new((SLOTS * 8) as usize);
    let vl = pz.register_all(&verdicts, Access::LOCAL_WRITE).unwrap();
    let mut rng = Rng(std::env::var("RMR_TEST_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
        })
        ^ 0x5eed_c4a0_5eed_c4a1
        | 1);
    let (mut started, mut done, mut aborted, mut dtos, mut bytes) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut mismatches, mut read_mismatches, mut reconnects, mut rails_lost) =
        (0u64, 0, 0u64, 0u64);
    let mut next_cookie = 1000u64;
    // Rails this connection lost (async events), and breaks that came
    // while it still had a rail: a failover that failed.
    let (mut lost_here, mut premature, mut rails_up) = (0u64, 0u64, 0u64);
    let mut conn = connect(&ia, &pz);
    println!("LIVE connected");
    // Per slot: the round's (length, checksum, read back?) while in flight.
    let mut slot: Vec<Option<(u64, u64, bool)>> = vec![None; SLOTS as usize];
    let mut pending: Vec<u8> = vec![0; SLOTS as usize]; // DTOs of the slot not yet complete
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(secs());
    let mut rss_start = 0;
    let post = |conn: &mut Conn, s: u64, what: u8, r: rmr_api::Result<()>, c: u64| -> bool {
        match r {
            Ok(()) => {
                conn.posted.insert(c, (s, what));
                true
            }
            Err(_) => false,
        }
    };
    loop {
        if rss_start == 0 && t0.elapsed() > Duration::from_secs(5) {
            rss_start = rss_kib();
        }
        // Start a round in every free slot.
        let mut broken = false;
        if Instant::now() < end {
            for s in 0..SLOTS {
                if slot[s as usize].is_some() || broken {
                    continue;
                }
                let len = 1 + rng.below(SLOT);
                let p = pattern(rng.next(), len as usize);
                src.write(s * SLOT, &p).unwrap();
                let sum = checksum(&p);
                notes.store_u64(s * NOTE, s).unwrap();
                notes.store_u64(s * NOTE + 8, sum).unwrap();
                notes.store_u64(s * NOTE + 16, len).unwrap();
                let readback = started % 4 == 3;
                started += 1;
                slot[s as usize] = Some((len, sum, readback));
                let (c1, c2, c3) = (next_cookie, next_cookie + 1, next_cookie + 2);
                next_cookie += 4;
                let (ep, ctx) = (conn.ep.clone(), conn.ctx);
                let ok = post(
                    &mut conn,
                    s,
                    VERDICT,
                    ep.post_recv(&[Sge::new(&*vl, s * 8, 8)], Cookie(c1), DtoFlags::empty()),
                    c1,
                ) && post(
                    &mut conn,
                    s,
                    WRITE,
                    ep.post_rdma_write(
                        &[Sge::new(&*sl, s * SLOT, len)],
                        ctx.at(s * SLOT),
                        Cookie(c2),
                        DtoFlags::empty(),
                    ),
                    c2,
                ) && post(
                    &mut conn,
                    s,
                    NOTIFY,
                    ep.post_send(&[Sge::new(&*nl, s * NOTE, NOTE)], Cookie(c3), DtoFlags::empty()),
                    c3,
                );
                dtos += 3;
                pending[s as usize] = 3;
                if !ok {
                    broken = true;
                }
            }
        }
        if !broken {
            match conn.evd.wait(Some(Duration::from_millis(500)), 1) {
                Ok(Event::Dto(c)) => {
                    let Some((s, what)) = conn.posted.remove(&c.cookie.0) else {
                        panic!("a completion of nothing posted, or twice: {c:?}");
                    };
                    if !c.status.is_ok() {
                        println!(
                            "LIVE error completion {:?} {:?} (state {:?})",
                            c.op,
                            c.status,
                            conn.ep.state()
                        );
                        broken = true;
                    } else {
                        pending[s as usize] -= 1;
                        if what == VERDICT {
                            let (len, sum, readback) = slot[s as usize].unwrap();
                            if verdicts.load_u64(s * 8).unwrap() != 1 {
                                mismatches += 1;
                                println!("LIVE client: slot {s}: the server found it damaged");
                            }
                            if readback {
                                let c4 = next_cookie;
                                next_cookie += 4;
                                let (ep, ctx) = (conn.ep.clone(), conn.ctx);
                                let r = ep.post_rdma_read(
                                    &[Sge::new(&*bl, s * SLOT, len)],
                                    ctx.at(s * SLOT),
                                    Cookie(c4),
                                    DtoFlags::empty(),
                                );
                                dtos += 1;
                                pending[s as usize] += 1;
                                if !post(&mut conn, s, READ, r, c4) {
                                    broken = true;
                                }
                                slot[s as usize] = Some((len, sum, false));
                            }
                        }
                        if what == READ {
                            let (len, sum, _) = slot[s as usize].unwrap();
                            if checksum(&back.to_vec(s * SLOT, len as usize).unwrap()) != sum {
                                println!("LIVE client: slot {s}: read back differs");
                                read_mismatches += 1;
                            }
                            bytes += len;
                        }
                        if pending[s as usize] == 0 && !broken {
                            let (len, _, _) = slot[s as usize].take().unwrap();
                            bytes += len;
                            done += 1;
                        }
                    }
                }
                Ok(e @ (Event::Broken { .. } | Event::Disconnected { .. })) => {
                    println!("LIVE end {e:?}");
                    broken = true;
                }
                Ok(Event::RailDown { rail, reason, .. }) => {
                    rails_lost += 1;
                    lost_here += 1;
                    println!("LIVE rail {rail} lost: {reason}");
                }
                Ok(Event::RailUp { rail, .. }) => {
                    rails_up += 1;
                    println!("LIVE rail {rail} up");
                }
                _ => {}
            }
        }
        if broken {
            // Every DTO still posted on the broken EP completes (flushed),
            // exactly once; its rounds are aborted, then a new connection.
            println!("LIVE broken after losing {lost_here} rails");
            // Three rails: the connection ends with its third; the first
            // two are async events.
            if lost_here < 2 {
                premature += 1;
            }
            lost_here = 0;
            let _ = conn.ep.disconnect();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !conn.posted.is_empty() {
                assert!(Instant::now() < deadline, "DTOs never completed: {:?}", conn.posted);
                if let Ok(Event::Dto(c)) = conn.evd.wait(Some(Duration::from_millis(200)), 1) {
                    // Done before the break (success) or flushed by it.
                    assert!(conn.posted.remove(&c.cookie.0).is_some(), "a completion twice: {c:?}");
                }
            }
            aborted += slot.iter().filter(|s| s.is_some()).count() as u64;
            slot.iter_mut().for_each(|s| *s = None);
            pending.iter_mut().for_each(|p| *p = 0);
            if Instant::now() >= end {
                break;
            }
            conn = connect(&ia, &pz);
            reconnects += 1;
            println!("LIVE connected");
            continue;
        }
        if Instant::now() >= end && slot.iter().all(Option::is_none) {
            break;
        }
    }
    // Tell the server (on a fresh connection if this one broke at the end).
    if conn.ep.state() != rmr_api::EpState::Connected {
        conn = connect(&ia, &pz);
    }
    notes.store_u64(16, u64::MAX).unwrap();
    conn.ep.post_send(&[Sge::new(&*nl, 0, NOTE)], Cookie(1), DtoFlags::empty()).unwrap();
    let _ = conn.evd.wait(Some(Duration::from_secs(10)), 1);
    println!(
        "RESULT client started={started} done={done} aborted={aborted} dtos={dtos} bytes={bytes} reconnects={reconnects} rails_lost={rails_lost} rails_up={rails_up}"
    );
    println!("RESULT client_rss_kib={rss_start},{}", rss_kib());
    println!("RESULT mismatches={mismatches}");
    println!("RESULT read_mismatches={read_mismatches}");
    println!("RESULT done={done}");
    println!("RESULT premature_breaks={premature}");
}

#[test]
fn lab_chaos_soak_rails_cut_healed_and_reshaped() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return server(),
        Ok("client") => return client(),
        _ => {}
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The campaign runs beside CI's 60 s run under another prefix.
    let prefix: &'static str = Box::leak(
        std::env::var("RMR_TEST_CHAOS_PREFIX").unwrap_or_else(|_| "rmrch".into()).into_boxed_str(),
    );
    let Some(lab) = Lab::pair(prefix, "300mbit,300mbit,300mbit") else { return };
    let secs = secs().to_string();
    // A send that lands on a rail where the receiver has not moved its
    // receives yet waits for them this long (the other side may take a few
    // seconds to notice the rail it lost: keepalive, on an idle rail).
    let env =
        [("RMR_TEST_CHAOS_SECS", secs.clone()), ("RMR_TCP_RNR_TIMEOUT_MS", "15000".to_string())];
    let srv = spawn_role(&lab.ns('b'), NAME, "server", &env);
    std::thread::sleep(Duration::from_millis(500));
    // The client's rails send stripes of 64 KiB and more zero-copy (the
    // tcp backend's `zerocopy`), the smaller ones copied: both paths meet
    // the cuts, and a cut rail's zero-copy sends must flush or complete
    // like any other.
    let mut cenv = env.to_vec();
    cenv.push(("RMR_TCP_ZEROCOPY", "64K".to_string()));
    let mut cli = spawn_role(&lab.ns('a'), NAME, "client", &cenv);
    // The client's lines, as they come.
    let (tx, lines) = std::sync::mpsc::channel();
    let out = cli.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l.clone());
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    // The faults' seed: new each run (printed; RMR_TEST_CHAOS_SEED replays
    // a run's choices).
    let seed: u64 = std::env::var("RMR_TEST_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                as u64
                | 1
        });
    println!("chaos seed {seed}");
    let mut rng = Rng(seed);
    let mut up = [true; 3];
    // When each rail was cut: it is healed only once both ends must have
    // declared it lost (the user timeout, 1.5 s, where data waits; up to
    // about 4 s more of keepalive on a rail idle at one end). A rail healed
    // sooner could be lost to one end only, and the two ends would then
    // post and send on different control rails (see RELIABILITY.md).
    let mut cut_at: [Option<Instant>; 3] = [None; 3];
    const HEAL_AFTER: Duration = Duration::from_secs(7);
    let (mut cuts, mut heals, mut rates) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let secs_n: u64 = secs.parse().unwrap();
    let mut calm_until = Instant::now() + Duration::from_secs(3);
    while start.elapsed() < Duration::from_secs(secs_n) {
        std::thread::sleep(Duration::from_millis(400 + rng.below(1600)));
        // A broken endpoint reconnects over every rail: heal them all and
        // hold off until it has.
        while let Ok(l) = lines.try_recv() {
            if l.contains("LIVE broken") {
                for (r, u) in up.iter_mut().enumerate() {
                    if !*u {
                        lab.heal(r);
                        *u = true;
                        heals += 1;
                    }
                }
                calm_until = Instant::now() + Duration::from_secs(6);
            }
        }
        if Instant::now() < calm_until {
            continue;
        }
        let down: Vec<usize> = (0..3)
            .filter(|&r| !up[r] && cut_at[r].is_some_and(|t| t.elapsed() >= HEAL_AFTER))
            .collect();
        let live: Vec<usize> = (0..3).filter(|&r| up[r]).collect();
        match rng.below(3) {
            0 if !down.is_empty() => {
                let r = down[rng.below(down.len() as u64) as usize];
                lab.heal(r);
                up[r] = true;
                heals += 1;
            }
            0 | 1 if live.len() >= 2 => {
                let r = live[rng.below(live.len() as u64) as usize];
                lab.cut(r);
                up[r] = false;
                cut_at[r] = Some(Instant::now());
                cuts += 1;
            }
            _ => {
                let r = rng.below(3) as usize;
                lab.rate(r, ["100mbit", "200mbit", "500mbit", "1gbit"][rng.below(4) as usize]);
                rates += 1;
            }
        }
    }
    for (r, u) in up.iter().enumerate() {
        if !*u {
            lab.heal(r);
            heals += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(150);
    while cli.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the client did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
    let c = reader.join().unwrap();
    assert!(cli.wait().unwrap().success(), "client failed:\n{c}");
    let s = finish(srv, "server");
    println!("{c}{s}");
    println!(
        "chaos: {secs} s, faults: {cuts} cuts, {heals} heals, {rates} rate changes over 3 rails"
    );
    // Each of these was an open failover bug once (RELIABILITY.md, "Chaos
    // soak"): a send re-sent after a failover though it had arrived, a
    // stale frame landing after a heal, a send meeting no receive while the
    // two ends' control rails differed.
    let checks = [
        (result(&s, "server_duplicates"), "a notify was delivered twice"),
        (result(&c, "read_mismatches"), "a read-back differed"),
        (result(&c, "mismatches"), "a round's data arrived damaged"),
        (result(&s, "bad"), "the server saw damaged data"),
        (result(&c, "premature_breaks"), "a connection broke with a rail left"),
        (result(&s, "server_early_errors"), "a DTO failed on a live connection"),
    ];
    for (n, what) in checks {
        assert_eq!(n, "0", "{what}");
    }
    assert!(result(&c, "done").parse::<u64>().unwrap() > 0, "no round completed");
    assert!(cuts + rates > 0, "no fault injected");
    for (out, key) in [(&c, "client_rss_kib"), (&s, "server_rss_kib")] {
        let v: Vec<u64> = result(out, key).split(',').map(|x| x.parse().unwrap()).collect();
        assert!(v[1] <= v[0] + 32 * 1024, "{key}: RSS grew from {} to {} KiB", v[0], v[1]);
    }
}
