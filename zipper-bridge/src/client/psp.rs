//! The client side's service point: a real PSP on the rail toward a
//! bridge; a bridge's connection requests (carrying the calling peer's own
//! private data) become connection requests of the `zipper` provider.

use super::ep::BridgedEp;
use super::evd::BridgeEvd;
use super::ia::BridgeIa;
use crate::handshake::BridgeHello;
use rmr_api::{ConnRequest, ConnRequestOps, Ep, Error, Evd, Event, Psp, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A listening service point for bridged connections.
pub struct BridgePsp {
    inner: Arc<dyn Psp>,
    closed: Arc<AtomicBool>,
}

impl BridgePsp {
    pub(crate) fn listen(ia: &BridgeIa, service: u16, user: Arc<dyn Evd>) -> Result<BridgePsp> {
        let evd = ia.inner.create_evd()?;
        let inner = ia.inner.create_psp(service, &evd)?;
        let closed = Arc::new(AtomicBool::new(false));
        let c = closed.clone();
        std::thread::Builder::new()
            .name("rmr-zip-psp".into())
            .spawn(move || {
                while !c.load(Ordering::Acquire) {
                    if let Ok(Event::ConnectionRequest(cr)) =
                        evd.wait(Some(Duration::from_millis(100)), 1)
                    {
                        if BridgeHello::decode(cr.private_data()).is_none() {
                            let _ = cr.reject(b"zipper: not a bridge connection");
                            continue;
                        }
                        if let Some(b) = user.as_any().downcast_ref::<BridgeEvd>() {
                            b.push(Event::ConnectionRequest(ConnRequest(Arc::new(
                                BridgeConnReq { cr },
                            ))));
                        }
                    }
                }
            })
            .map_err(|e| Error::io("spawn zipper psp thread", e))?;
        Ok(BridgePsp { inner, closed })
    }
}

struct BridgeConnReq {
    cr: ConnRequest,
}

impl BridgeConnReq {
    fn hello(&self) -> BridgeHello<'_> {
        BridgeHello::decode(self.cr.private_data()).expect("checked on arrival")
    }
}

impl ConnRequestOps for BridgeConnReq {
    fn accept(&self, ep: &Arc<dyn Ep>, pd: &[u8]) -> Result<()> {
        let b = ep
            .as_any()
            .downcast_ref::<BridgedEp>()
            .ok_or_else(|| Error::invalid("EP is not a bridged EP"))?;
        b.accept_from(&self.cr, &self.hello(), pd)
    }

    fn reject(&self, pd: &[u8]) -> Result<()> {
        self.cr.reject(pd)
    }

    fn private_data(&self) -> &[u8] {
        self.hello().user
    }

    fn peer(&self) -> String {
        format!("{} via bridge {}", self.hello().from, self.cr.peer())
    }
}

impl Psp for BridgePsp {
    fn service(&self) -> u16 {
        self.inner.service()
    }

    fn address(&self) -> String {
        self.inner.address()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.inner.close();
    }
}

impl Drop for BridgePsp {
    fn drop(&mut self) {
        self.close();
    }
}
