//! Lab test of the tcp backend's near send buffer (`near`, `near_sndbuf`)
//! between two hosts: two network namespaces joined by unshaped veth
//! rails (scripts/lab.sh), this binary run as the server in one and the
//! client in the other. By default (`near=host`) a peer on another host
//! keeps the kernel's autotuning; with `near=rtt` the buffer follows the
//! round trip the kernel measured as the connection opened: near (and set,
//! each of a multirail EP's two rails to its half) when it was at most
//! `backend_tcp::NEAR_RTT`, autotuned otherwise, and the EP's note says which with the
//! round trip it saw. Needs root (as CI has).

use rmr_api::provider::conformance::ep_note;
use rmr_api::{EpEvds, Event};
use std::time::Duration;

#[path = "support/lab.rs"]
#[allow(unused_imports)] // its data helpers: the other lab tests'
mod lab;
use lab::*;

const SERVICE: u16 = 7640;
/// The spec's rails on each side, comma separated (`RMR_TEST_NEAR_RAILS`).
const RAILS: &str = "RMR_TEST_NEAR_RAILS";

fn open(rails: &str) -> std::sync::Arc<dyn rmr_api::Ia> {
    backend_tcp::register();
    multirail::register();
    let spec = if rails.contains(',') { format!("multirail:{rails}") } else { rails.to_string() };
    rmr_api::open(&spec).expect("open")
}

/// The `sndbuf` notes of `ep`: its own (a tcp EP) or each rail's.
fn notes(ep: &std::sync::Arc<dyn rmr_api::Ep>) -> Vec<String> {
    match ep.as_any().downcast_ref::<multirail::MrEp>() {
        Some(mr) => mr.rail_eps().iter().map(|r| ep_note(&**r, "sndbuf")).collect(),
        None => vec![ep_note(&**ep, "sndbuf")],
    }
}

/// The server's side of the client's rails (198.18.k.1 -> 198.18.k.2).
fn peer_side(rails: &str) -> String {
    let one = |r: &str| format!("{}.2", r.strip_suffix(".1").expect("a .1 address"));
    rails.split(',').map(one).collect::<Vec<_>>().join(",")
}

fn server() {
    let ia = open(&peer_side(&std::env::var(RAILS).unwrap()));
    let (pz, evd, cevd) =
        (ia.create_pz().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(SERVICE, &cevd).unwrap();
    let ep =
        ia.create_ep(&pz, &EpEvds { request: evd.clone(), recv: evd, conn: cevd.clone() }).unwrap();
    match cevd.wait(Some(Duration::from_secs(30)), 1) {
        Ok(Event::ConnectionRequest(cr)) => cr.accept(&ep, b"").unwrap(),
        e => panic!("no connection request: {e:?}"),
    }
    for n in notes(&ep) {
        println!("RESULT note={n}");
    }
    // Until the client disconnects.
    let _ = cevd.wait(Some(Duration::from_secs(30)), 1);
    drop(psp);
}

fn client() {
    let rails = std::env::var(RAILS).unwrap();
    let ia = open(&rails);
    let (pz, evd, cevd) =
        (ia.create_pz().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    // A multirail EP connects to every rail's address at once.
    let peer = peer_side(&rails).replace("tcp:", "");
    let mut tries = 0;
    let ep = loop {
        let ep = ia
            .create_ep(&pz, &EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() })
            .unwrap();
        match ep.connect(&peer, SERVICE, b"", Duration::from_secs(5)) {
            Ok(_) => break ep,
            Err(e) if tries < 50 => {
                tries += 1;
                println!("retry: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    for n in notes(&ep) {
        println!("RESULT note={n}");
    }
    let _ = ep.disconnect();
}

/// Runs the server and the client in the lab with `env`; returns both
/// sides' notes.
fn run(lab: &Lab, name: &str, env: &[(&str, String)]) -> Vec<String> {
    let srv = spawn_role(&lab.ns('b'), name, "server", env);
    std::thread::sleep(Duration::from_millis(300));
    let cli = spawn_role(&lab.ns('a'), name, "client", env);
    let c = finish(cli, "client");
    let s = finish(srv, "server");
    [c, s]
        .iter()
        .flat_map(|o| {
            o.lines()
                .filter_map(|l| l.find("RESULT note=").map(|i| l[i + 12..].trim_end().to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Checks a `near=rtt` note across the lab: near with the given size asked
/// when the round trip was at most `NEAR_RTT`, autotuned when it was more.
fn check_rtt_note(n: &str, asked: usize) {
    let near = backend_tcp::NEAR_RTT.as_micros() as u64;
    let rtt = |s: &str| -> u64 {
        let i = s.find("round trip ").unwrap_or_else(|| panic!("{n}")) + 11;
        s[i..].split(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{n}"))
    };
    if n.starts_with("kernel autotuning") {
        assert!(n.ends_with(" us at connect)") && rtt(n) > near, "{n}");
    } else {
        assert!(n.contains(&format!(" ({asked} asked; near: round trip ")), "{n}");
        assert!(rtt(n) <= near, "{n}");
    }
}

#[test]
fn lab_near_send_buffer_across_hosts() {
    let name = "lab_near_send_buffer_across_hosts";
    match std::env::var(ROLE).as_deref() {
        Ok("server") => return server(),
        Ok("client") => return client(),
        _ => {}
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lab) = Lab::pair("rmrn", "none,none") else { return };
    let one = "tcp:198.18.0.1".to_string();
    let two = "tcp:198.18.0.1,tcp:198.18.1.1".to_string();
    // By default another host's peer is not near, whatever its round trip.
    let notes = run(&lab, name, &[(RAILS, one.clone())]);
    assert_eq!(notes.len(), 2, "{notes:?}");
    for n in &notes {
        assert_eq!(n, "kernel autotuning (the peer is on another host)");
    }
    // near=rtt: by the round trip; a multirail EP's rails take half each.
    for (rails, asked, count) in [(one, 512usize << 10, 2), (two, 256 << 10, 4)] {
        let env = [(RAILS, rails), ("RMR_TCP_NEAR", "rtt".to_string())];
        let notes = run(&lab, name, &env);
        assert_eq!(notes.len(), count, "{notes:?}");
        for n in &notes {
            check_rtt_note(n, asked);
        }
        println!("near=rtt notes: {notes:?}");
    }
}
