//! Lab tests: multirail over real, rate-limited rails. Each test builds two
//! network namespaces joined by veth pairs shaped with tbf (scripts/lab.sh),
//! runs itself as the server in one and the client in the other, and tears
//! the lab down afterwards, pass or fail. Needs root (as CI has).

use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, EpEvds, Evd, Event, MemRegion, RmrContext, Sge};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/lab.rs"]
mod lab;
use lab::*;

const RAILS_B: &str = "tcp:198.18.0.2,tcp:198.18.1.2";
const RAILS_A: &str = "tcp:198.18.0.1,tcp:198.18.1.1";
const SERVICE: u16 = 7600;

/// Environment variable naming the striping policy of both roles (`even`
/// unless set).
const POLICY: &str = "RMR_TEST_LAB_POLICY";

fn open(rails: &str) -> Arc<dyn rmr_api::Ia> {
    backend_tcp::register();
    multirail::register();
    let policy = std::env::var(POLICY).unwrap_or_else(|_| "even".into());
    rmr_api::open(&format!("multirail:{rails};engine=pinned;policy={policy};threshold=8K"))
        .expect("open multirail")
}

fn next_dto(evd: &Arc<dyn Evd>) -> rmr_api::DtoCompletion {
    loop {
        match evd.wait(Some(Duration::from_secs(60)), 1).expect("event") {
            Event::Dto(c) => return c,
            Event::RailDown { rail, reason, .. } => println!("RESULT rail_down={rail} ({reason})"),
            Event::RailUp { rail, .. } => println!("RESULT rail_up={rail}"),
            _ => {}
        }
    }
}

/// Server role: a target region of `len` bytes; for each of `rounds`
/// notifies, checks the region's checksum against the one in the notify and
/// answers 1 (match) or 0.
fn server(len: usize, rounds: u64) {
    let ia = open(RAILS_B);
    let (pz, evd, pevd) =
        (ia.create_pz().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let target = MemRegion::new(len);
    let tl = pz.register_all(&target, Access::LOCAL_WRITE | Access::REMOTE_WRITE).unwrap();
    let ctl = MemRegion::new(64);
    let cl = pz.register_all(&ctl, Access::LOCAL_WRITE).unwrap();
    let _psp = ia.create_psp(SERVICE, &pevd).unwrap();
    println!("RESULT listening=1");
    let ep = match pevd.wait(Some(Duration::from_secs(30)), 1).unwrap() {
        Event::ConnectionRequest(cr) => {
            let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
            cr.accept(&ep, &tl.rmr_context().to_bytes()).unwrap();
            ep
        }
        e => panic!("{e:?}"),
    };
    let mut bad = 0;
    for r in 0..rounds {
        ep.post_recv(&[Sge::new(&*cl, 0, 8)], Cookie(r), DtoFlags::empty()).unwrap();
        let c = next_dto(&evd);
        assert!(c.status.is_ok(), "{c:?}");
        let want = ctl.load_u64(0).unwrap();
        let got = checksum(&target.to_vec(0, len).unwrap());
        if got != want {
            bad += 1;
        }
        ctl.store_u64(8, u64::from(got == want)).unwrap();
        ep.post_send(&[Sge::new(&*cl, 8, 8)], Cookie(r), DtoFlags::SUPPRESS).unwrap();
    }
    println!("RESULT bad_rounds={bad}");
    std::thread::sleep(Duration::from_millis(300));
}

/// Client role: `rounds` times, write a fresh pattern over the whole region
/// (striped), notify with its checksum, and require the server's verdict.
fn client(len: usize, rounds: u64) {
    let ia = open(RAILS_A);
    let (pz, evd) = (ia.create_pz().unwrap(), ia.create_evd().unwrap());
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let pd = connect_retry(&*ep, "198.18.0.2,198.18.1.2", SERVICE);
    let ctx = RmrContext::from_bytes(&pd).unwrap();
    let src = MemRegion::new(len);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let ctl = MemRegion::new(64);
    let cl = pz.register_all(&ctl, Access::LOCAL_WRITE).unwrap();
    let t0 = Instant::now();
    for r in 0..rounds {
        let p = pattern(r + 1, len);
        src.write(0, &p).unwrap();
        ctl.store_u64(0, checksum(&p)).unwrap();
        ep.post_recv(&[Sge::new(&*cl, 8, 8)], Cookie(1000 + r), DtoFlags::empty()).unwrap();
        ep.post_rdma_write(&[Sge::whole(&*sl)], ctx.at(0), Cookie(r), DtoFlags::SUPPRESS).unwrap();
        ep.post_send(&[Sge::new(&*cl, 0, 8)], Cookie(r), DtoFlags::SUPPRESS).unwrap();
        let c = next_dto(&evd);
        assert!(c.status.is_ok(), "round {r}: {c:?}");
        assert_eq!(
            ctl.load_u64(8).unwrap(),
            1,
            "round {r}: the server saw the notify before the data"
        );
    }
    println!("RESULT secs={:.3}", t0.elapsed().as_secs_f64());
    println!("RESULT weights={}", rmr_api::provider::conformance::ep_note(&*ep, "weights"));
    println!("RESULT ok=1");
    let _ = ep.disconnect();
}

fn role_or_run(name: &str, len: usize, rounds: u64, parent: impl FnOnce(&str)) {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => server(len, rounds),
        Ok("client") => client(len, rounds),
        _ => parent(name),
    }
}

#[test]
fn lab_striped_write_uses_every_rail() {
    role_or_run("lab_striped_write_uses_every_rail", 16 << 20, 3, |name| {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lab) = Lab::pair("rmrl1", "300mbit,300mbit") else { return };
        let srv = spawn_role(&lab.ns('b'), name, "server", &[]);
        std::thread::sleep(Duration::from_millis(300));
        let before = [lab.tx_bytes(0), lab.tx_bytes(1)];
        let cli = spawn_role(&lab.ns('a'), name, "client", &[]);
        let c = finish(cli, "client");
        let s = finish(srv, "server");
        assert_eq!(result(&c, "ok"), "1");
        assert_eq!(result(&s, "bad_rounds"), "0");
        let sent = [lab.tx_bytes(0) - before[0], lab.tx_bytes(1) - before[1]];
        let total = (3 * (16u64 << 20)) as f64;
        for (r, b) in sent.iter().enumerate() {
            assert!(
                *b as f64 > 0.4 * total,
                "rail {r} carried only {b} of {total} bytes: {sent:?}"
            );
        }
        println!("per-rail bytes {sent:?}, {} s", result(&c, "secs"));
    });
}

/// Adaptive striping (BSS) over rails of 4:1 learns their speeds from
/// its own stripes' completion times: the fast rail's weight grows from
/// an even 0.5 towards 0.8 while the data stays intact.
#[test]
fn lab_adaptive_weights_follow_rail_speed() {
    role_or_run("lab_adaptive_weights_follow_rail_speed", 1 << 20, 40, |name| {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lab) = Lab::pair("rmrl6", "400mbit,100mbit") else { return };
        let env = [(POLICY, "adaptive".to_string())];
        let srv = spawn_role(&lab.ns('b'), name, "server", &env);
        std::thread::sleep(Duration::from_millis(300));
        let cli = spawn_role(&lab.ns('a'), name, "client", &env);
        let c = finish(cli, "client");
        let s = finish(srv, "server");
        assert_eq!(result(&c, "ok"), "1");
        assert_eq!(result(&s, "bad_rounds"), "0");
        let w: Vec<f64> =
            result(&c, "weights").split(',').map(|x| x.parse().expect("weight")).collect();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!((w[0] + w[1] - 1.0).abs() < 1e-6, "weights sum to 1: {w:?}");
        assert!(w[0] > 0.65, "the 400 Mbit/s rail's weight stayed at {w:?}");
        println!("weights after 40 MiB over 4:1 rails {w:?}, {} s", result(&c, "secs"));
    });
}

#[test]
fn lab_ordering_under_load() {
    role_or_run("lab_ordering_under_load", 256 << 10, 200, |name| {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lab) = Lab::pair("rmrl2", "500mbit,500mbit") else { return };
        let srv = spawn_role(&lab.ns('b'), name, "server", &[]);
        std::thread::sleep(Duration::from_millis(300));
        let c = finish(spawn_role(&lab.ns('a'), name, "client", &[]), "client");
        let s = finish(srv, "server");
        assert_eq!(result(&c, "ok"), "1");
        assert_eq!(result(&s, "bad_rounds"), "0", "a receive completed before striped data landed");
    });
}

#[test]
fn lab_failover_rail_cut_mid_transfer() {
    role_or_run("lab_failover_rail_cut_mid_transfer", 64 << 20, 1, |name| {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lab) = Lab::pair("rmrl3", "200mbit,200mbit") else { return };
        let srv = spawn_role(&lab.ns('b'), name, "server", &[]);
        std::thread::sleep(Duration::from_millis(300));
        let cli = spawn_role(&lab.ns('a'), name, "client", &[]);
        // 64 MiB at 400 Mbit/s takes ~1.3 s: cut rail 1 while stripes are in flight.
        std::thread::sleep(Duration::from_millis(700));
        lab.cut(1);
        let c = finish(cli, "client");
        let s = finish(srv, "server");
        assert_eq!(result(&c, "ok"), "1", "the striped write did not complete intact");
        assert_eq!(result(&s, "bad_rounds"), "0");
        assert!(result(&c, "rail_down").starts_with('1'), "no RailDown named the lost rail:\n{c}");
        println!("failover: {} s", result(&c, "secs"));
    });
}

/// A rail's link goes down mid-transfer and comes back after the rail was
/// declared lost: the transfer degrades to the surviving rail and goes on
/// (every round's data verified by the server), nothing hangs.
#[test]
fn lab_rail_down_then_up_degrades_and_keeps_going() {
    role_or_run("lab_rail_down_then_up_degrades_and_keeps_going", 8 << 20, 10, |name| {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lab) = Lab::pair("rmrl4", "200mbit,200mbit") else { return };
        let srv = spawn_role(&lab.ns('b'), name, "server", &[]);
        std::thread::sleep(Duration::from_millis(300));
        let mut cli = spawn_role(&lab.ns('a'), name, "client", &[]);
        let lines = stream_lines(&mut cli);
        std::thread::sleep(Duration::from_millis(600));
        lab.cut(1);
        let lost = Instant::now();
        let l = wait_line(&lines, "RESULT rail_down=", Duration::from_secs(30));
        assert!(l.contains("rail_down=1"), "the RailDown event does not name rail 1: {l}");
        println!("rail 1 declared lost {:?} after the cut", lost.elapsed());
        lab.heal(1);
        let l = wait_line(&lines, "RESULT ok=", Duration::from_secs(60));
        assert!(l.ends_with("ok=1"), "{l}");
        let st = cli.wait().expect("client");
        assert!(st.success(), "client failed");
        let s = finish(srv, "server");
        assert_eq!(result(&s, "bad_rounds"), "0", "a round's data arrived damaged");
    });
}

/// A link flap shorter than the TCP user timeout: the rail stalls and
/// resumes; every round completes intact.
#[test]
fn lab_rail_flap_shorter_than_timeout_completes_intact() {
    role_or_run("lab_rail_flap_shorter_than_timeout_completes_intact", 8 << 20, 12, |name| {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let Some(lab) = Lab::pair("rmrl5", "200mbit,200mbit") else { return };
        let srv = spawn_role(&lab.ns('b'), name, "server", &[]);
        std::thread::sleep(Duration::from_millis(300));
        let cli = spawn_role(&lab.ns('a'), name, "client", &[]);
        std::thread::sleep(Duration::from_millis(500));
        lab.cut(0);
        std::thread::sleep(Duration::from_millis(300));
        lab.heal(0);
        let c = finish(cli, "client");
        let s = finish(srv, "server");
        assert_eq!(result(&c, "ok"), "1");
        assert_eq!(result(&s, "bad_rounds"), "0");
        println!("flap: {} s, rail lost: {}", result(&c, "secs"), c.contains("RESULT rail_down="));
    });
}

/// `LAB_MTU` gives every veth of the lab that MTU (the jumbo-frame latency
/// rounds of scripts/bench-lab.sh), shaping still on; a bad value is
/// refused before anything is made.
#[test]
fn lab_mtu_option_sets_every_veth() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() {
        println!("SKIPPED: lab tests need root for network namespaces");
        return;
    }
    let lab = |mtu: &str| {
        Command::new("bash")
            .args([&lab_script(), "pair", "rmrl9", "200mbit,none"])
            .env("LAB_MTU", mtu)
            .output()
            .expect("run lab.sh")
    };
    let bad = lab("jumbo");
    assert!(!bad.status.success(), "a bad LAB_MTU must be refused");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad LAB_MTU"));
    let ns = Command::new("ip").args(["netns", "list"]).output().expect("ip netns");
    assert!(!String::from_utf8_lossy(&ns.stdout).contains("rmrl9"), "refused, it makes nothing");
    let out = lab("9000");
    let l = Lab("rmrl9");
    assert!(out.status.success(), "lab.sh pair failed: {}", String::from_utf8_lossy(&out.stderr));
    let show = |side: char, what: &[&str]| {
        let o = Command::new("ip")
            .args(["netns", "exec", &l.ns(side)])
            .args(what)
            .output()
            .expect("ip/tc");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for side in ['a', 'b'] {
        for rail in 0..2 {
            let dev = format!("rmrl9{side}{rail}");
            let link = show(side, &["ip", "link", "show", &dev]);
            assert!(link.contains("mtu 9000"), "{dev}: {link}");
        }
        let qd = show(side, &["tc", "qdisc", "show", "dev", &format!("rmrl9{side}0")]);
        assert!(qd.contains("tbf"), "rail 0 stays shaped at MTU 9000: {qd}");
    }
}
