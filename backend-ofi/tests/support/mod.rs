//! What several of the backend's test binaries share.

use rmr_api::{Ep, Evd, Event, Psp};
use std::sync::Arc;
use std::time::Duration;

/// Connects `a` to the service point `psp` (whose events go to `pevd`) and
/// accepts the request into `b`; returns once `a`'s connect returned.
pub(crate) fn join(a: &Arc<dyn Ep>, b: &Arc<dyn Ep>, psp: &Arc<dyn Psp>, pevd: &Arc<dyn Evd>) {
    let (addr, svc) = (psp.address(), psp.service());
    std::thread::scope(|s| {
        let h = s.spawn(|| a.connect(&addr, svc, b"", Duration::from_secs(10)).unwrap());
        match pevd.wait(Some(Duration::from_secs(10)), 1).unwrap() {
            Event::ConnectionRequest(cr) => cr.accept(b, b"").unwrap(),
            e => panic!("a connection request, not {e:?}"),
        }
        h.join().unwrap();
    });
}

/// Waits on each EVD for its endpoint's `Established` event.
pub(crate) fn established(evds: &[&Arc<dyn Evd>]) {
    for evd in evds {
        assert!(matches!(
            evd.wait(Some(Duration::from_secs(10)), 1),
            Ok(Event::Established { .. })
        ));
    }
}
