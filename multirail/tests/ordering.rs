//! uDAPL's second ordering rule across rails under load: an RDMA write
//! posted before a send is visible at the target when the send's receive
//! completes — with many rounds in flight, so that writes are deferred
//! behind earlier sends (the pinned engine's usual case) and land on
//! another rail than the send. Regression test for a fence taken before the
//! writes deferred ahead of it were launched (1% of notifies overtook their
//! data).

use rmr_api::Cookie;
use rmr_api::{Access, DtoFlags, DtoOp, EpEvds, Event, MemRegion, RmrContext, Sge};
use std::time::Duration;

const SLOTS: usize = 16;
const MAX: usize = 64 << 10;
const ROUNDS: u64 = 4000;

fn sum(b: &[u8]) -> u64 {
    b.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

#[test]
fn write_then_send_holds_with_deferred_writes_on_other_rails() {
    backend_tcp::register();
    multirail::register();
    // Whole (unstriped) writes go to the least-loaded rail, sends to rail 0.
    let spec = "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned;policy=even;threshold=1G";
    let (ia_a, ia_b) = (rmr_api::open(spec).unwrap(), rmr_api::open(spec).unwrap());
    let (pz_b, evd_b, pevd) =
        (ia_b.create_pz().unwrap(), ia_b.create_evd().unwrap(), ia_b.create_evd().unwrap());
    let psp = ia_b.create_psp(0, &pevd).unwrap();
    let target = MemRegion::new(SLOTS * MAX);
    let tl = pz_b.register_all(&target, Access::REMOTE_WRITE | Access::LOCAL_WRITE).unwrap();
    let bmsg = MemRegion::new(SLOTS * 64);
    let bml = pz_b.register_all(&bmsg, Access::LOCAL_WRITE).unwrap();
    let (addr, svc) = (psp.address(), psp.service());
    let server = std::thread::spawn(move || {
        let ep = match pevd.wait(Some(Duration::from_secs(20)), 1).unwrap() {
            Event::ConnectionRequest(cr) => {
                let ep = ia_b.create_ep(&pz_b, &EpEvds::single(&evd_b)).unwrap();
                cr.accept(&ep, &tl.rmr_context().to_bytes()).unwrap();
                ep
            }
            e => panic!("{e:?}"),
        };
        for r in 0..SLOTS as u64 {
            ep.post_recv(&[Sge::new(&*bml, r * 64, 32)], Cookie(r), DtoFlags::empty()).unwrap();
        }
        let (mut bad, mut n) = (0u64, 0u64);
        while n < ROUNDS {
            let Event::Dto(c) = evd_b.wait(Some(Duration::from_secs(30)), 1).unwrap() else {
                continue;
            };
            assert!(c.status.is_ok(), "{c:?}");
            let r = c.cookie.0;
            let (slot, len, want) = (
                bmsg.load_u64(r * 64).unwrap(),
                bmsg.load_u64(r * 64 + 8).unwrap(),
                bmsg.load_u64(r * 64 + 16).unwrap(),
            );
            let ok = sum(&target.to_vec(slot * MAX as u64, len as usize).unwrap()) == want;
            bad += u64::from(!ok);
            n += 1;
            ep.post_recv(&[Sge::new(&*bml, r * 64, 32)], Cookie(r), DtoFlags::empty()).unwrap();
            bmsg.store_u64(r * 64 + 32, slot | (u64::from(ok) << 32)).unwrap();
            ep.post_send(&[Sge::new(&*bml, r * 64 + 32, 8)], Cookie(0), DtoFlags::SUPPRESS)
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        bad
    });
    let (pz, evd) = (ia_a.create_pz().unwrap(), ia_a.create_evd().unwrap());
    let ep = ia_a.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let ctx =
        RmrContext::from_bytes(&ep.connect(&addr, svc, b"", Duration::from_secs(20)).unwrap())
            .unwrap();
    let src = MemRegion::new(SLOTS * MAX);
    let sl = pz.register_all(&src, Access::LOCAL_WRITE).unwrap();
    let msg = MemRegion::new(SLOTS * 64);
    let ml = pz.register_all(&msg, Access::LOCAL_WRITE).unwrap();
    for r in 0..SLOTS as u64 {
        ep.post_recv(&[Sge::new(&*ml, r * 64 + 32, 8)], Cookie(r), DtoFlags::empty()).unwrap();
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut round = |slot: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 1 + (x % MAX as u64) as usize;
        let data: Vec<u8> = (0..len).map(|i| (x >> (i % 56)) as u8 ^ i as u8).collect();
        let at = slot * MAX as u64;
        src.write(at, &data).unwrap();
        msg.store_u64(slot * 64, slot).unwrap();
        msg.store_u64(slot * 64 + 8, len as u64).unwrap();
        msg.store_u64(slot * 64 + 16, sum(&data)).unwrap();
        ep.post_rdma_write(
            &[Sge::new(&*sl, at, len as u64)],
            ctx.at(at),
            Cookie(0),
            DtoFlags::SUPPRESS,
        )
        .unwrap();
        ep.post_send(&[Sge::new(&*ml, slot * 64, 24)], Cookie(0), DtoFlags::SUPPRESS).unwrap();
    };
    for s in 0..SLOTS as u64 {
        round(s);
    }
    let (mut started, mut done, mut told_bad) = (SLOTS as u64, 0u64, 0u64);
    while done < ROUNDS {
        let Event::Dto(c) = evd.wait(Some(Duration::from_secs(30)), 1).expect("reply") else {
            continue;
        };
        assert!(c.status.is_ok() && c.op == DtoOp::Recv, "{c:?}");
        let v = msg.load_u64(c.cookie.0 * 64 + 32).unwrap();
        ep.post_recv(&[Sge::new(&*ml, c.cookie.0 * 64 + 32, 8)], c.cookie, DtoFlags::empty())
            .unwrap();
        told_bad += u64::from(v >> 32 == 0);
        done += 1;
        if started < ROUNDS {
            round(v & 0xffff_ffff);
            started += 1;
        }
    }
    let bad = server.join().unwrap();
    assert_eq!(bad, told_bad);
    assert_eq!(
        bad, 0,
        "{bad} of {ROUNDS} receives completed before their write's data was visible"
    );
}
