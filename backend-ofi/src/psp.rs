//! Public service points: a passive endpoint (`fi_passive_ep` +
//! `fi_listen`) whose FI_CONNREQ events become connection requests.

use crate::ep::{CmHdr, OfiEp};
use crate::evd::EvdShared;
use crate::ffi::{Info, Pep};
use crate::ia::{IaShared, ofi_evd};
use rmr_api::{ConnRequest, ConnRequestOps, Ep, Error, Evd, Event, Psp, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

pub(crate) struct PspShared {
    pub(crate) ia: Arc<IaShared>,
    pep: Mutex<Option<Pep>>,
    evd: Arc<EvdShared>,
    addr: SocketAddr,
    fid: usize,
}

impl PspShared {
    /// A CONNREQ arrived: check our header, queue the request.
    pub(crate) fn on_connreq(self: &Arc<Self>, info: Info, data: Vec<u8>) {
        let peer = info.dest_addr().map(|a| a.ip().to_string()).unwrap_or_default();
        let hdr = CmHdr::parse(&data, CmHdr::CONNECT);
        let pd = if hdr.is_some() { data[crate::ia::CM_HDR..].to_vec() } else { vec![] };
        let req = OfiConnReq { psp: self.clone(), info: Mutex::new(Some(info)), hdr, pd, peer };
        if hdr.is_some() {
            self.evd.push(Event::ConnectionRequest(ConnRequest(Arc::new(req))));
        } // else: not one of ours, rejected on drop
    }

    fn reject(&self, info: &Info, pd: &[u8]) -> Result<()> {
        let pep = self.pep.lock().unwrap_or_else(|e| e.into_inner());
        let pep = pep.as_ref().ok_or_else(|| Error::Broken("service point closed".into()))?;
        let mut b = CmHdr::reject().encode().to_vec();
        b.extend_from_slice(pd);
        pep.reject(info.handle(), &b)
    }
}

/// A listening service point of the libfabric backend.
pub struct OfiPsp {
    sh: Arc<PspShared>,
}

impl OfiPsp {
    pub(crate) fn listen(ia: &Arc<IaShared>, service: u16, evd: Arc<dyn Evd>) -> Result<OfiPsp> {
        let evd = ofi_evd(&evd, ia)?;
        let node = ia.ip.filter(|i| !i.is_unspecified()).map(|i| i.to_string());
        let mut hints = ia.hints.clone();
        hints.src = None;
        let info =
            crate::ffi::Info::get(&hints, node.as_deref(), Some(&service.to_string()), true)?;
        let pep = Pep::open(&ia.fabric, info, &ia.eq).map_err(|e| {
            Error::io(format!("listen on port {service}"), std::io::Error::other(e.to_string()))
        })?;
        let ip = ia.ip.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let addr = pep.name().unwrap_or(SocketAddr::new(ip, service));
        let fid = pep.fid() as usize;
        let sh = Arc::new(PspShared { ia: ia.clone(), pep: Mutex::new(Some(pep)), evd, addr, fid });
        ia.peps.lock().unwrap_or_else(|e| e.into_inner()).insert(fid, Arc::downgrade(&sh));
        Ok(OfiPsp { sh })
    }
}

impl Psp for OfiPsp {
    fn service(&self) -> u16 {
        self.sh.addr.port()
    }

    fn address(&self) -> String {
        let ip = self.sh.addr.ip();
        if ip.is_unspecified() { "127.0.0.1".into() } else { ip.to_string() }
    }

    fn close(&self) {
        self.sh.ia.peps.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.sh.fid);
        drop(self.sh.pep.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl Drop for OfiPsp {
    fn drop(&mut self) {
        self.close();
    }
}

/// A pending connection request (owns the request's fi_info).
pub(crate) struct OfiConnReq {
    psp: Arc<PspShared>,
    info: Mutex<Option<Info>>,
    hdr: Option<CmHdr>,
    pd: Vec<u8>,
    peer: String,
}

impl OfiConnReq {
    fn take(&self) -> Result<Info> {
        self.info
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| Error::invalid("connection request already answered"))
    }
}

impl Drop for OfiConnReq {
    fn drop(&mut self) {
        if let Some(info) = self.info.get_mut().ok().and_then(Option::take) {
            let _ = self.psp.reject(&info, b"");
        }
    }
}

impl ConnRequestOps for OfiConnReq {
    fn accept(&self, ep: &Arc<dyn Ep>, pd: &[u8]) -> Result<()> {
        let oep = ep
            .as_any()
            .downcast_ref::<OfiEp>()
            .ok_or_else(|| Error::invalid("EP of another provider"))?;
        if !Arc::ptr_eq(&oep.sh.ia, &self.psp.ia) {
            return Err(Error::invalid("EP of another IA than the PSP's"));
        }
        if pd.len() > self.psp.ia.attr.max_private_data {
            return Err(Error::invalid("private data too long"));
        }
        let hdr = self.hdr.ok_or_else(|| Error::Protocol("request without rmr header".into()))?;
        let info = self.take()?;
        oep.sh.accept(info, hdr, self.pd.clone(), pd)
    }

    fn reject(&self, pd: &[u8]) -> Result<()> {
        let info = self.take()?;
        let n = pd.len().min(self.psp.ia.attr.max_private_data);
        self.psp.reject(&info, &pd[..n])
    }

    fn private_data(&self) -> &[u8] {
        &self.pd
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}
