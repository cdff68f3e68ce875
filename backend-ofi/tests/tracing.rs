//! What a user sees of the libfabric backend with a `tracing` subscriber
//! installed (as the binaries do with `RUST_LOG`): the connect and accept
//! spans with their outcomes, and an error completion. One test in its own
//! binary: the subscriber is the process's.

use rmr_api::{Access, Cookie, DtoFlags, EpEvds, Event, MemRegion, RmrContext, Sge};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn ofi_connect_and_accept_spans_and_error_completions_reach_a_subscriber() {
    let cap = Captured::default();
    let w = cap.clone();
    let sub = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("rmr=debug"))
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    tracing::subscriber::set_global_default(sub).unwrap();

    backend_ofi::register();
    let ia = rmr_api::open("ofi:tcp:127.0.0.1").unwrap();
    let pz = ia.create_pz().unwrap();
    let (evd, sevd, pevd) =
        (ia.create_evd().unwrap(), ia.create_evd().unwrap(), ia.create_evd().unwrap());
    let psp = ia.create_psp(0, &pevd).unwrap();
    let ep = ia.create_ep(&pz, &EpEvds::single(&evd)).unwrap();
    let sep = ia.create_ep(&pz, &EpEvds::single(&sevd)).unwrap();
    let (s2, pe) = (sep.clone(), pevd.clone());
    let t = std::thread::spawn(move || match pe.wait(Some(Duration::from_secs(10)), 1) {
        Ok(Event::ConnectionRequest(cr)) => cr.accept(&s2, b"").unwrap(),
        e => panic!("{e:?}"),
    });
    ep.connect(&psp.address(), psp.service(), b"", Duration::from_secs(10)).unwrap();
    t.join().unwrap();
    // A write with a key the target never gave: an error completion.
    let src = MemRegion::new(64);
    let sl = pz.register_all(&src, Access::empty()).unwrap();
    let bogus = RmrContext::new(0x0bad_cafe, 0x1000, 64);
    ep.post_rdma_write(&[Sge::new(&*sl, 0, 8)], bogus.at(0), Cookie(7), DtoFlags::empty()).unwrap();
    loop {
        if let Event::Dto(c) = evd.wait(Some(Duration::from_secs(10)), 1).unwrap() {
            assert!(!c.status.is_ok());
            break;
        }
    }
    let text = String::from_utf8_lossy(&cap.0.lock().unwrap()).into_owned();
    println!("{text}");
    assert!(text.contains("error completion") && text.contains("cookie=7"), "{text}");
    assert!(text.contains("connect{") && text.contains("connected"), "the connect span: {text}");
    assert!(text.contains("accept{") && text.contains("accepted"), "the accept span: {text}");
}
