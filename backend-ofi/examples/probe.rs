//! Scratch probe (development only).
use std::time::Duration;
fn main() {
    backend_ofi::register();
    let prov = std::env::args().nth(1).unwrap_or("tcp".into());
    let ia = rmr_api::open(&format!("ofi:{prov}:127.0.0.1")).unwrap();
    println!("{:?}", ia.attr());
    let evd = ia.create_evd().unwrap();
    let psp = ia.create_psp(0, &evd).unwrap();
    println!("psp {} {}", psp.address(), psp.service());
    let pz = ia.create_pz().unwrap();
    let cevd = ia.create_evd().unwrap();
    let ep = ia.create_ep(&pz, &rmr_api::EpEvds::single(&cevd)).unwrap();
    let r = ep.connect(&psp.address(), psp.service(), b"x", Duration::from_secs(2));
    println!("connect: {r:?}");
    println!("{:?}", evd.wait(Some(Duration::from_secs(1)), 1));
}
