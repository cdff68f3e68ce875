//! Public service points: a listening rdma_cm id; connection requests are
//! handed to the PSP's EVD and accepted onto an endpoint or rejected.

use crate::cm_event::CmEvent;
use crate::ep::VerbsEp;
use crate::evd::VerbsEvd;
use crate::ia::{IaCore, Route};
use crate::private_data::{self, Ctrl, Kind};
use crate::sys::cm::CmId;
use rmr_api::{ConnRequest, ConnRequestOps, Ep, Error, Event, Psp, Result};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The shared state of a PSP (the event thread holds it weakly).
pub(crate) struct PspCore {
    ia: Arc<IaCore>,
    evd: Arc<VerbsEvd>,
    id: Mutex<Option<CmId>>,
    key: usize,
    service: u16,
    closed: AtomicBool,
}

impl PspCore {
    /// A request arrived: hand it to the EVD.
    pub(crate) fn on_request(&self, id: CmId, ev: CmEvent) {
        if self.closed.load(Ordering::Acquire) {
            let _ = id.reject(&[]);
            return;
        }
        let (user, ctrl) = match private_data::decode(&ev.private_data) {
            Some(d) if d.kind == Kind::Connect => (d.user, d.ctrl),
            _ => (ev.private_data.clone(), Ctrl::default()),
        };
        let peer = id.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
        let req = VerbsConnRequest {
            ia: self.ia.clone(),
            id: Mutex::new(Some(id)),
            user,
            ctrl,
            peer_rd: ev.peer_rd,
            peer,
        };
        self.evd.push(Event::ConnectionRequest(ConnRequest(Arc::new(req))));
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.ia.route_remove(self.key);
        drop(self.id.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

/// A listening service point of the verbs backend.
pub struct VerbsPsp {
    core: Arc<PspCore>,
}

impl VerbsPsp {
    pub(crate) fn listen(ia: Arc<IaCore>, service: u16, evd: Arc<VerbsEvd>) -> Result<VerbsPsp> {
        let id = CmId::create(&ia.chan)?;
        id.bind(SocketAddr::new(ia.ip, service))?;
        id.listen(128)?;
        let service = id.local_addr().map(|a| a.port()).unwrap_or(service);
        let key = id.key();
        let core = Arc::new(PspCore {
            ia: ia.clone(),
            evd,
            id: Mutex::new(Some(id)),
            key,
            service,
            closed: AtomicBool::new(false),
        });
        ia.route_add(key, Route::Psp(Arc::downgrade(&core)));
        Ok(VerbsPsp { core })
    }
}

impl Psp for VerbsPsp {
    fn service(&self) -> u16 {
        self.core.service
    }

    fn address(&self) -> String {
        self.core.ia.ip.to_string()
    }

    fn close(&self) {
        self.core.close();
    }
}

impl Drop for VerbsPsp {
    fn drop(&mut self) {
        self.core.close();
    }
}

/// A pending connection request (rejected when dropped unanswered).
struct VerbsConnRequest {
    ia: Arc<IaCore>,
    id: Mutex<Option<CmId>>,
    user: Vec<u8>,
    ctrl: Ctrl,
    peer_rd: (u8, u8),
    peer: String,
}

impl VerbsConnRequest {
    fn take(&self) -> Result<CmId> {
        self.id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::invalid("connection request already answered"))
    }
}

impl ConnRequestOps for VerbsConnRequest {
    fn accept(&self, ep: &Arc<dyn Ep>, private_data: &[u8]) -> Result<()> {
        let ep = ep
            .as_any()
            .downcast_ref::<VerbsEp>()
            .ok_or_else(|| Error::invalid("EP of another provider"))?;
        if !Arc::ptr_eq(&ep.core.ia, &self.ia) {
            return Err(Error::invalid("EP of another IA than the PSP's"));
        }
        if private_data.len() > private_data::MAX_USER {
            return Err(Error::invalid(format!(
                "private data over {} bytes",
                private_data::MAX_USER
            )));
        }
        let id = self.take()?;
        ep.core.accept(id, self.user.clone(), self.ctrl, self.peer_rd, private_data)
    }

    fn reject(&self, private_data: &[u8]) -> Result<()> {
        let id = self.take()?;
        let n = private_data.len().min(private_data::MAX_USER);
        let pd = private_data::encode(Kind::Reject, Ctrl::default(), &private_data[..n])?;
        id.reject(&pd)
    }

    fn private_data(&self) -> &[u8] {
        &self.user
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

impl Drop for VerbsConnRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = id.reject(&[]);
        }
    }
}
