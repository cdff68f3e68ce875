//! Lab test: a rail that heals rejoins. Two shaped 200 Mbit/s rails carry
//! a checked stream (1 MiB striped writes, 8 in flight, each notified with its checksum
//! and answered by the server's verdict). Rail 1's link is cut until both
//! ends declare the rail down (the tcp user timeout, 1.5 s here), then
//! restored, three times. The test asserts three `RailDown`/`RailUp`
//! pairs at each end, every round intact, every DTO completed once, and
//! the endpoints' counters. It prints the stream's rate over two rails
//! before the first cut, over one rail while rail 1 is down, and in the 2 s
//! after each `RailUp` (`scripts/bench-rejoin.sh` collects them for
//! BENCHMARKS.md; no timing is asserted here).

use multirail::MrEp;
use rmr_api::{Access, Cookie, DtoFlags, Ep, EpEvds, Event, MemRegion, RmrContext, Sge, Status};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/lab.rs"]
mod lab;
use lab::*;

const NAME: &str = "lab_rail_rejoins_three_times";
const SERVICE: u16 = 7620;
const LEN: usize = 1 << 20;
/// Writes in flight together (one per slot of the target).
const SLOTS: usize = 8;
/// The parent creates this file to end the stream.
const STOP: &str = "RMR_TEST_REJOIN_STOP";
const WAIT: Duration = Duration::from_secs(30);

fn open(rails: &str) -> Arc<dyn rmr_api::Ia> {
    backend_tcp::register();
    multirail::register();
    rmr_api::open(&format!("multirail:{rails};engine=pinned;policy=even;threshold=8K"))
        .expect("open multirail")
}

fn stats(ep: &Arc<dyn Ep>) -> multirail::MrStats {
    ep.as_any().downcast_ref::<MrEp>().expect("a multirail EP").stats()
}

/// Prints a rail event (with the time since `t0`); false for others.
fn rail_event(e: &Event, t0: Instant) -> bool {
    let ms = t0.elapsed().as_millis();
    match e {
        Event::RailDown { rail, reason, .. } => println!("EVENT {ms} down {rail} ({reason})"),
        Event::RailUp { rail, .. } => println!("EVENT {ms} up {rail}"),
        Event::Established { .. } => {}
        _ => return false,
    }
    true
}

/// Server: checks each notified slot until a notify of 0. Notifies are
/// 16 bytes (checksum, slot); `SLOTS` receives stay posted.
fn server() {
    let ia = open("tcp:198.18.0.2,tcp:198.18.1.2");
    let (pz, evd, pevd) =
        (ia.create_pz().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let target = MemRegion::new(SLOTS * LEN);
    let tl = pz.register_all(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let ctl = MemRegion::new(SLOTS * 32);
    let cl = pz.register_all(&ctl, Access::LOCAL_WRITE).unwrap();
    let _psp = ia.create_psp(SERVICE, &pevd).unwrap();
    let ep = match pevd.wait(Some(WAIT), 1).unwrap() {
        Event::ConnectionRequest(cr) => {
            let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
            cr.accept(&ep, &tl.rmr_context().to_bytes()).unwrap();
            ep
        }
        e => panic!("{e:?}"),
    };
    let post = |k: u64| {
        let at = (k % SLOTS as u64) * 32;
        ep.post_recv(&[Sge::new(&*cl, at, 16)], Cookie(k), DtoFlags::empty()).unwrap();
    };
    for k in 0..SLOTS as u64 {
        post(k);
    }
    let t0 = Instant::now();
    let (mut good, mut bad) = (0u64, 0u64);
    for k in 0.. {
        let c = loop {
            match evd.wait(Some(WAIT), 1).expect("server: an event") {
                Event::Dto(c) if c.cookie.0 == k => break c,
                Event::Dto(c) if c.status.is_ok() => {}
                e if rail_event(&e, t0) => {}
                e => panic!("server: {e:?}"),
            }
        };
        assert_eq!(c.status, Status::Success, "server: receive {k}");
        let at = (k % SLOTS as u64) * 32;
        let (want, slot) = (ctl.load_u64(at).unwrap(), ctl.load_u64(at + 8).unwrap());
        if want == 0 {
            break;
        }
        let data = target.to_vec(slot * LEN as u64, LEN).unwrap();
        let ok = checksum(&data) == want;
        if ok {
            good += 1;
        } else {
            bad += 1;
        }
        ctl.store_u64(at + 16, u64::from(ok)).unwrap();
        ep.post_send(&[Sge::new(&*cl, at + 16, 8)], Cookie(1 << 40 | k), DtoFlags::SUPPRESS)
            .unwrap();
        post(k + SLOTS as u64);
    }
    let s = stats(&ep);
    println!("RESULT good={good}");
    println!("RESULT bad={bad}");
    println!("RESULT server_stats={},{},{}", s.rails_live, s.rails_down, s.rails_up);
    std::thread::sleep(Duration::from_millis(300));
}

/// Client: batches of `SLOTS` writes (each a fresh pattern into its own
/// slot, notified with its checksum, answered with a verdict) until the
/// stop file appears; prints each rail event and, at the end, when each
/// write completed (for the rates).
fn client() {
    let ia = open("tcp:198.18.0.1,tcp:198.18.1.1");
    let (pz, evd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let pd = connect_retry(&*ep, "198.18.0.2,198.18.1.2", SERVICE);
    let ctx = RmrContext::from_bytes(&pd).unwrap();
    let src = MemRegion::new(SLOTS * LEN);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let ctl = MemRegion::new(SLOTS * 32);
    let cl = pz.register_all(&ctl, Access::LOCAL_WRITE).unwrap();
    let stop = std::env::var(STOP).expect("stop file");
    let t0 = Instant::now();
    println!("RESULT started=1");
    let mut done: HashSet<u64> = HashSet::new();
    let mut ends: Vec<u128> = Vec::new();
    let mut r = 0u64;
    while !std::path::Path::new(&stop).exists() {
        for s in 0..SLOTS as u64 {
            r += 1;
            let (off, at) = (s * LEN as u64, s * 32);
            let p = pattern(r, LEN);
            src.write(off, &p).unwrap();
            ctl.store_u64(at, checksum(&p)).unwrap();
            ctl.store_u64(at + 8, s).unwrap();
            ctl.store_u64(at + 16, 7).unwrap();
            let flags = DtoFlags::empty();
            ep.post_recv(&[Sge::new(&*cl, at + 16, 8)], Cookie(3 << 40 | r), flags).unwrap();
            let local = [Sge::new(&*sl, off, LEN as u64)];
            ep.post_rdma_write(&local, ctx.at(off), Cookie(1 << 40 | r), flags).unwrap();
            ep.post_send(&[Sge::new(&*cl, at, 16)], Cookie(2 << 40 | r), flags).unwrap();
        }
        let mut left = 3 * SLOTS;
        while left > 0 {
            match evd.wait(Some(WAIT), 1).expect("client: an event") {
                Event::Dto(c) => {
                    assert_eq!(c.status, Status::Success, "round {r}: {c:?}");
                    assert!(done.insert(c.cookie.0), "{:#x} completed twice", c.cookie.0);
                    if c.cookie.0 >> 40 == 1 {
                        ends.push(t0.elapsed().as_millis());
                    }
                    left -= 1;
                }
                e if rail_event(&e, t0) => {}
                e => panic!("client: {e:?}"),
            }
        }
        for s in 0..SLOTS as u64 {
            let v = ctl.load_u64(s * 32 + 16).unwrap();
            assert_eq!(v, 1, "batch ending at {r}, slot {s}: the server found the data damaged");
        }
    }
    ctl.store_u64(0, 0).unwrap();
    ep.post_send(&[Sge::new(&*cl, 0, 16)], Cookie(9 << 40), DtoFlags::SUPPRESS).unwrap();
    let s = stats(&ep);
    println!("RESULT rounds={r}");
    println!("RESULT once={}", u8::from(done.len() as u64 == 3 * r));
    println!("RESULT client_stats={},{},{}", s.rails_live, s.rails_down, s.rails_up);
    let ends: Vec<String> = ends.iter().map(u128::to_string).collect();
    println!("RESULT ends={}", ends.join(","));
    std::thread::sleep(Duration::from_millis(500));
}

/// Mbit/s of the stream between `a` and `b` ms (writes that completed inside).
fn rate(ends: &[u64], a: u64, b: u64) -> f64 {
    let n = ends.iter().filter(|&&t| t > a && t <= b).count();
    (n * LEN * 8) as f64 / ((b - a) as f64 / 1000.0) / 1e6
}

#[test]
fn lab_rail_rejoins_three_times() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return server(),
        Ok("client") => return client(),
        _ => {}
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lab) = Lab::pair("rmrlj", "200mbit,200mbit") else { return };
    let stop = format!("/tmp/rmr-rejoin-stop-{}", std::process::id());
    let _ = std::fs::remove_file(&stop);
    let env = [(STOP, stop.clone())];
    let srv = spawn_role(&lab.ns('b'), NAME, "server", &env);
    std::thread::sleep(Duration::from_millis(300));
    let mut cli = spawn_role(&lab.ns('a'), NAME, "client", &env);
    let lines = stream_lines(&mut cli);
    wait_line(&lines, "RESULT started=", WAIT);
    // Each cycle: rail 1 cut until the client declares it down, 2 s more,
    // restored, back up, then 3 s on two rails.
    let mut times = Vec::new();
    std::thread::sleep(Duration::from_secs(3));
    for cycle in 1..=3 {
        lab.cut(1);
        let down = wait_line(&lines, "EVENT", WAIT);
        assert!(down.contains(" down 1 "), "cycle {cycle}: {down}");
        std::thread::sleep(Duration::from_secs(2));
        lab.heal(1);
        let up = wait_line(&lines, "EVENT", WAIT);
        assert!(up.contains(" up 1"), "cycle {cycle}: {up}");
        let ms = |l: &str| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
        times.push((ms(&down), ms(&up)));
        std::thread::sleep(Duration::from_secs(3));
    }
    std::fs::write(&stop, b"stop").unwrap();
    let st = cli.wait().expect("client");
    let c: String = lines.iter().map(|l| l + "\n").collect();
    assert!(st.success(), "client failed:\n{c}");
    let s = finish(srv, "server");
    let _ = std::fs::remove_file(&stop);
    let rounds: u64 = result(&c, "rounds").parse().unwrap();
    assert_eq!(result(&s, "good").parse::<u64>().unwrap(), rounds, "rounds checked by the server");
    assert_eq!(result(&s, "bad"), "0", "a round's data arrived damaged");
    assert_eq!(result(&c, "once"), "1", "every DTO completed once");
    assert_eq!(result(&c, "client_stats"), "2,3,3", "client: live, down, up");
    assert_eq!(result(&s, "server_stats"), "2,3,3", "server: live, down, up");
    // The rates (reported, not asserted).
    let ends: Vec<u64> = result(&c, "ends").split(',').map(|x| x.parse().unwrap()).collect();
    let two = rate(&ends, 1000, times[0].0.saturating_sub(1500).max(1500));
    println!("RATE two_rails_before={two:.1}");
    for (k, (down, up)) in times.iter().enumerate() {
        let one = rate(&ends, down + 300, *up);
        let after = rate(&ends, *up, up + 2000);
        let second = rate(&ends, up + 1000, up + 2000);
        println!(
            "RATE cycle={} one_rail={one:.1} after_up_2s={after:.1} ratio={:.2} second_s={second:.1} ratio_by_2s={:.2} down_to_up_ms={}",
            k + 1,
            after / one,
            second / one,
            up - down
        );
    }
}
