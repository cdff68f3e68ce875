//! A fence does not wait out the peer's acknowledgement delay: an ordered
//! DTO (a send) held behind writes on other rails probes those rails with
//! an URGENT zero-length write, which the peer acknowledges at once. Here
//! every rail's peer delays acknowledgements by 30 s, so without the probe
//! the send would complete only after 30 s; with it, at once. Real TCP
//! rails on loopback, every engine. And a user's own URGENT DTO reaches its
//! rail URGENT, as on a single endpoint.

use backend_tcp::{TcpConfig, TcpIa};
use rmr_api::Cookie;
use rmr_api::provider::Provider;
use rmr_api::provider::conformance::{Buf, Pair, Target, pattern};
use rmr_api::{Access, DtoFlags, DtoOp, Error, Event, Ia};
use std::sync::Arc;
use std::time::Duration;

/// `tcpslowack:<ip>`: the TCP backend with a 30 s acknowledgement delay.
struct SlowAck;

impl Provider for SlowAck {
    fn name(&self) -> &'static str {
        "tcpslowack"
    }
    fn describe(&self) -> &'static str {
        "tcp with a 30 s acknowledgement delay (test)"
    }
    fn open(&self, rest: &str) -> rmr_api::Result<Arc<dyn Ia>> {
        let ip = rest.parse().map_err(|_| Error::invalid("ip"))?;
        let cfg = TcpConfig { ack_delay: Duration::from_secs(30), ..TcpConfig::default() };
        Ok(Arc::new(TcpIa::with_config(ip, cfg)?))
    }
}

fn register() {
    rmr_api::provider::register(Arc::new(SlowAck));
    multirail::register();
}

fn run(engine: &str) {
    let s = format!(
        "multirail:tcpslowack:127.0.0.1,tcpslowack:127.0.0.2;engine={engine};policy=round-robin"
    );
    let t = Target::new("multirail-urgent", register, &s, &s);
    let p = Pair::new(&t);
    const N: u64 = 8;
    const SZ: u64 = 4096;
    let remote = Buf::new(&p.pz_b, (N * SZ) as usize, Access::ALL, 0);
    let local = Buf::new(&p.pz_a, (N * SZ) as usize, Access::ALL, 0);
    local.mem.write(0, &pattern(3, (N * SZ) as usize)).unwrap();
    let rbuf = Buf::new(&p.pz_b, 64, Access::ALL, 0);
    let sbuf = Buf::new(&p.pz_a, 64, Access::ALL, 0);
    sbuf.mem.write(0, b"notify").unwrap();

    for round in 0..3 {
        p.b.post_recv(&[rbuf.sge()], Cookie(round), DtoFlags::empty()).unwrap();
        // Whole 4 KiB writes, alternately on each rail (round-robin); each
        // is signalled on its rail (too big to go silent), and its
        // acknowledgement would take 30 s.
        for i in 0..N {
            p.a.post_rdma_write(
                &[local.part(i * SZ, SZ)],
                remote.ctx().at(i * SZ),
                Cookie(100 + i),
                DtoFlags::SUPPRESS,
            )
            .unwrap();
        }
        // The send waits for every write on the other rail: its probe
        // asks for the acknowledgement now.
        // (The send itself is suppressed: a signalled one would complete
        // only with its own delayed acknowledgement, as it should.)
        p.a.post_send(&[sbuf.part(0, 6)], Cookie(round), DtoFlags::SUPPRESS).unwrap();
        match p.evd_b.wait(Some(Duration::from_secs(10)), 1) {
            Ok(Event::Dto(c)) => {
                assert!(c.status.is_ok(), "{c:?}");
                assert_eq!((c.op, c.cookie.0), (DtoOp::Recv, round));
            }
            other => panic!("{engine}: the fenced send waited out the ack delay: {other:?}"),
        }
        assert_eq!(remote.bytes(), pattern(3, (N * SZ) as usize), "{engine}: writes not visible");
        remote.mem.fill(0, N * SZ, 0).unwrap();
    }
    let probes: u64 =
        p.a.attr()
            .notes
            .iter()
            .find(|(k, _)| k == "probes")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
    assert!(probes >= 3, "{engine}: no probe hurried the fences ({probes})");
}

#[test]
fn fenced_send_probes_pinned() {
    run("pinned");
}

#[test]
fn fenced_send_probes_inline() {
    run("inline");
}

#[test]
fn fenced_send_probes_fork_join() {
    run("fork-join");
}

/// A user's URGENT write goes URGENT on its rail: acknowledged at once, and
/// its acknowledgement completes the plain write posted before it on that
/// rail (one rail, so nothing else would: no fence, no probe).
fn user_urgent(engine: &str) {
    let s = format!("multirail:tcpslowack:127.0.0.1;engine={engine}");
    let t = Target::new("multirail-urgent-user", register, &s, &s);
    let p = Pair::new(&t);
    let remote = Buf::new(&p.pz_b, 8192, Access::ALL, 0);
    let local = Buf::new(&p.pz_a, 4096, Access::ALL, 0);
    local.mem.write(0, &pattern(5, 4096)).unwrap();
    p.a.post_rdma_write(&[local.sge()], remote.ctx().at(0), Cookie(1), DtoFlags::empty()).unwrap();
    let early = p.evd_a.wait(Some(Duration::from_millis(300)), 1);
    assert!(
        matches!(early, Err(Error::Timeout)),
        "{engine}: a plain write completed before its delayed acknowledgement: {early:?}"
    );
    p.a.post_rdma_write(&[local.sge()], remote.ctx().at(4096), Cookie(2), DtoFlags::URGENT)
        .unwrap();
    for want in [1, 2] {
        match p.evd_a.wait(Some(Duration::from_secs(10)), 1) {
            Ok(Event::Dto(c)) => {
                assert!(c.status.is_ok(), "{c:?}");
                assert_eq!(c.cookie.0, want, "{engine}: completions out of order");
            }
            other => panic!("{engine}: write {want} waited out the ack delay: {other:?}"),
        }
    }
    let mut both = pattern(5, 4096);
    both.extend(pattern(5, 4096));
    assert_eq!(remote.bytes(), both, "{engine}: writes not visible");
}

#[test]
fn a_users_urgent_write_is_urgent_on_its_rail_pinned() {
    user_urgent("pinned");
}

#[test]
fn a_users_urgent_write_is_urgent_on_its_rail_inline() {
    user_urgent("inline");
}
