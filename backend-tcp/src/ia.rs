//! The TCP interface adapter, [`TcpIa`]: one local IP address, the
//! factory of the PZs, EVDs, endpoints and service points of the modules
//! before it (so it comes last in the reading order).

use crate::config::TcpConfig;
use crate::domain::{IaShared, KeyTable, TcpPz, soft_evd};
use crate::engine::Engine;
use crate::ep::TcpEp;
use crate::psp::TcpPsp;
use crate::wire;
use rmr_api::provider::SoftEvd;
use rmr_api::{Caps, Ep, EpEvds, Error, Evd, Ia, IaAttr, Psp, Pz, Result};
use std::any::Any;
use std::net::IpAddr;
use std::sync::Arc;

/// One rail of the TCP backend: a local IP address.
pub struct TcpIa {
    pub(crate) shared: Arc<IaShared>,
}

impl TcpIa {
    /// Opens an IA bound to `ip` with `cfg`.
    ///
    /// # Errors
    /// [`Error::BadSetting`] for a value of `cfg` out of its range;
    /// [`Error::Io`] when the IA's progress engine (an `epoll` set and an
    /// eventfd) cannot be made: the process is out of descriptors.
    pub fn with_config(ip: IpAddr, cfg: TcpConfig) -> Result<TcpIa> {
        cfg.check()?;
        let attr = IaAttr {
            provider: "tcp".into(),
            address: ip.to_string(),
            max_msg_size: wire::MAX_PAYLOAD,
            max_sges: 16,
            max_dtos: cfg.max_dtos,
            max_private_data: wire::MAX_PRIVATE,
            caps: Caps::RDMA_READ | Caps::WRITE_IMM | Caps::ATOMICS | Caps::OVERRUN_AT_SENDER,
            link_speed_bps: None,
        };
        let engine = Engine::new(format!("rmr-tcp-{ip}"), cfg.watch)
            .map_err(|e| Error::io("make the IA's progress engine", e))?;
        Ok(TcpIa {
            shared: Arc::new(IaShared {
                attr,
                ip,
                keys: KeyTable::default(),
                cfg,
                engine: Arc::new(engine),
            }),
        })
    }
}

impl Ia for TcpIa {
    fn attr(&self) -> &IaAttr {
        &self.shared.attr
    }

    fn create_pz(&self) -> Result<Arc<dyn Pz>> {
        Ok(Arc::new(TcpPz { id: rmr_api::provider::fresh_id(), ia: self.shared.clone() }))
    }

    fn create_evd(&self) -> Result<Arc<dyn Evd>> {
        Ok(Arc::new(SoftEvd::default()))
    }

    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn Ep>> {
        let pz = pz
            .as_any()
            .downcast_ref::<TcpPz>()
            .ok_or_else(|| Error::invalid("PZ of another provider"))?;
        if !Arc::ptr_eq(&pz.ia, &self.shared) {
            return Err(Error::invalid("PZ of another IA"));
        }
        soft_evd(&evds.request)?;
        soft_evd(&evds.recv)?;
        soft_evd(&evds.conn)?;
        Ok(TcpEp::create(self.shared.clone(), pz.id, evds.clone()))
    }

    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>> {
        soft_evd(evd)?;
        Ok(Arc::new(TcpPsp::listen(self.shared.clone(), service, evd.clone())?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
