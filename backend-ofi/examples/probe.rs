//! Scratch probe (development only).
use rmr_api::{Access, DtoFlags, EpEvds, Event, MemRegion, Sge};
use std::time::Duration;
fn main() {
    backend_ofi::register();
    let prov = std::env::args().nth(1).unwrap_or("tcp".into());
    let ia = rmr_api::open(&format!("ofi:{prov}:127.0.0.1")).unwrap();
    println!("{:?}", ia.attr());
    let evd = ia.create_evd().unwrap();
    let psp = ia.create_psp(0, &evd).unwrap();
    let pz = ia.create_pz().unwrap();
    let pz2 = ia.create_pz().unwrap();
    let target = MemRegion::new(4096);
    let tl = pz2.register_all(&target, Access::ALL).unwrap();
    let ctx = tl.rmr_context();
    let (ia2, pz2c, evd2) = (ia.clone(), pz2.clone(), evd.clone());
    let sevd = ia2.create_evd().unwrap();
    let sevd2 = sevd.clone();
    let server = std::thread::spawn(move || {
        let sep = ia2.create_ep(&pz2c, &EpEvds::single(&sevd2)).unwrap();
        match evd2.wait(Some(Duration::from_secs(5)), 1).unwrap() {
            Event::ConnectionRequest(cr) => cr.accept(&sep, b"welcome").unwrap(),
            e => panic!("{e:?}"),
        }
        sep
    });
    let cevd = ia.create_evd().unwrap();
    let ep = ia.create_ep(&pz, &EpEvds::single(&cevd)).unwrap();
    let r = ep.connect(&psp.address(), psp.service(), b"x", Duration::from_secs(2));
    println!("connect: {r:?} {:?}", ep.attr().notes);
    let sep = server.join().unwrap();
    println!("{:?}", cevd.wait(Some(Duration::from_secs(1)), 1));
    let src = MemRegion::from_bytes(b"hello, rdma");
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let mode = std::env::args().nth(2).unwrap_or_default();
    let mut c = ctx;
    if mode == "badkey" { c = rmr_api::RmrContext::new(ctx.key() ^ 0x5a5a, ctx.addr, ctx.len); }
    if mode == "read" {
        target.write(0, b"remote data").unwrap();
        let dl = pz.register_all(&src, Access::LOCAL_WRITE).unwrap();
        ep.post_rdma_read(&[Sge::whole(&*dl)], &c, 0, 7, DtoFlags::empty()).unwrap();
    } else {
        ep.post_rdma_write(&[Sge::whole(&*sl)], &c, 0, 7, DtoFlags::empty()).unwrap();
    }
    println!("{:?}", cevd.wait(Some(Duration::from_secs(3)), 1));
    println!("{:?}", cevd.wait(Some(Duration::from_secs(1)), 1));
    println!("{:?}", sevd.wait(Some(Duration::from_secs(1)), 1));
    println!("target {:?} src {:?}", target.to_vec(0, 11).unwrap(), src.to_vec(0,11).unwrap());
    drop(sep);
}
