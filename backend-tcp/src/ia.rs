//! The TCP interface adapter, protection zones, memory regions and the key
//! table that the receive path checks every remote access against.

use crate::ep::TcpEp;
use crate::psp::TcpPsp;
use crate::wire;
use rmr_api::provider::SoftEvd;
use rmr_api::{
    Access, Caps, EpEvds, Error, Evd, Ia, IaAttr, Lmr, MemRegion, Psp, Pz, Result, RmrContext,
};
use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Tunables of an IA, read from the spec's options and the environment.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// How long the receive path waits for a posted receive before the
    /// connection is declared broken (`RMR_TCP_RNR_TIMEOUT_MS`, default 5000).
    pub rnr_timeout: Duration,
    /// TCP_USER_TIMEOUT and keepalive budget: how long unacknowledged data or
    /// a silent link may last before the EP is broken (`RMR_TCP_USER_TIMEOUT_MS`, default 4000).
    pub user_timeout: Duration,
    /// Outstanding send-side DTOs per EP (default 4096).
    pub max_dtos: usize,
    /// Posted receives per EP (default 4096).
    pub max_recvs: usize,
    /// How long an acknowledgement a peer asked for may wait for an
    /// outgoing frame to ride on (`RMR_TCP_ACK_DELAY_US`, default 50; 0
    /// acknowledges at once).
    pub ack_delay: Duration,
    /// Batch small frames into one `send` until the next frame or the next
    /// drive (`RMR_TCP_BATCH`, default on; `0` writes every frame at once).
    pub batch: bool,
}

fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            rnr_timeout: env_ms("RMR_TCP_RNR_TIMEOUT_MS", 5000),
            user_timeout: env_ms("RMR_TCP_USER_TIMEOUT_MS", 4000),
            max_dtos: 4096,
            max_recvs: 4096,
            ack_delay: Duration::from_micros(
                std::env::var("RMR_TCP_ACK_DELAY_US")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(50),
            ),
            batch: std::env::var("RMR_TCP_BATCH").map_or(true, |v| v != "0"),
        }
    }
}

/// A registered region as the receive path sees it.
pub(crate) struct LmrInner {
    pub(crate) key: u64,
    pub(crate) region: Arc<MemRegion>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    pub(crate) pz_id: u64,
    pub(crate) registered: AtomicBool,
}

impl LmrInner {
    /// The target-side check of a remote access: right, PZ and bounds.
    /// Returns the offset within the region.
    pub(crate) fn check_remote(
        &self,
        pz_id: u64,
        need: Access,
        addr: u64,
        len: u64,
    ) -> std::result::Result<u64, rmr_api::Status> {
        use rmr_api::Status;
        if !self.registered.load(Ordering::Acquire) {
            return Err(Status::RemoteAccess);
        }
        if self.pz_id != pz_id {
            return Err(Status::Protection);
        }
        if !self.access.contains(need) {
            return Err(Status::RemoteAccess);
        }
        let base = self.region.addr() + self.offset;
        let off = addr.checked_sub(base).ok_or(Status::OutOfBounds)?;
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.offset + off),
            _ => Err(Status::OutOfBounds),
        }
    }
}

/// Key -> region, per IA.
#[derive(Default)]
pub(crate) struct KeyTable {
    map: RwLock<HashMap<u64, Arc<LmrInner>>>,
}

impl KeyTable {
    pub(crate) fn lookup(&self, key: u64) -> Option<Arc<LmrInner>> {
        self.map.read().unwrap_or_else(|e| e.into_inner()).get(&key).cloned()
    }

    fn insert(&self, make: impl Fn(u64) -> LmrInner) -> Result<Arc<LmrInner>> {
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        loop {
            // Unguessable 64-bit keys: a peer cannot forge access to a region it was not given.
            let key = getrandom::u64()
                .map_err(|e| Error::io("getrandom", std::io::Error::other(e.to_string())))?;
            if key != 0 && !m.contains_key(&key) {
                let inner = Arc::new(make(key));
                m.insert(key, inner.clone());
                return Ok(inner);
            }
        }
    }

    fn remove(&self, key: u64) {
        self.map.write().unwrap_or_else(|e| e.into_inner()).remove(&key);
    }
}

pub(crate) struct IaShared {
    pub(crate) attr: IaAttr,
    pub(crate) ip: IpAddr,
    pub(crate) keys: KeyTable,
    pub(crate) cfg: TcpConfig,
}

/// One rail of the TCP backend: a local IP address.
pub struct TcpIa {
    pub(crate) shared: Arc<IaShared>,
}

impl TcpIa {
    /// Opens an IA bound to `ip` with `cfg`.
    pub fn with_config(ip: IpAddr, cfg: TcpConfig) -> TcpIa {
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
        TcpIa { shared: Arc::new(IaShared { attr, ip, keys: KeyTable::default(), cfg }) }
    }
}

pub(crate) fn soft_evd(evd: &Arc<dyn Evd>) -> Result<()> {
    if evd.as_any().downcast_ref::<SoftEvd>().is_none() {
        return Err(Error::invalid("the tcp backend needs EVDs created by a tcp IA (SoftEvd)"));
    }
    Ok(())
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

use rmr_api::Ep;

/// A protection zone of the TCP backend.
pub struct TcpPz {
    id: u64,
    ia: Arc<IaShared>,
}

impl Pz for TcpPz {
    fn id(&self) -> u64 {
        self.id
    }

    fn register(
        &self,
        region: &Arc<MemRegion>,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<Arc<dyn Lmr>> {
        region.check(offset, len)?;
        let inner = self.ia.keys.insert(|key| LmrInner {
            key,
            region: region.clone(),
            offset,
            len,
            access,
            pz_id: self.id,
            registered: AtomicBool::new(true),
        })?;
        Ok(Arc::new(TcpLmr { inner, ia: self.ia.clone() }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A registered region of the TCP backend. Dropping it deregisters.
pub struct TcpLmr {
    inner: Arc<LmrInner>,
    ia: Arc<IaShared>,
}

impl Lmr for TcpLmr {
    fn region(&self) -> &Arc<MemRegion> {
        &self.inner.region
    }
    fn offset(&self) -> u64 {
        self.inner.offset
    }
    fn len(&self) -> u64 {
        self.inner.len
    }
    fn access(&self) -> Access {
        self.inner.access
    }
    fn pz_id(&self) -> u64 {
        self.inner.pz_id
    }
    fn rmr_context(&self) -> RmrContext {
        RmrContext::new(
            self.inner.key,
            self.inner.region.addr() + self.inner.offset,
            self.inner.len,
        )
    }
    fn is_registered(&self) -> bool {
        self.inner.registered.load(Ordering::Acquire)
    }
    fn deregister(&self) -> Result<()> {
        self.inner.registered.store(false, Ordering::Release);
        self.ia.keys.remove(self.inner.key);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for TcpLmr {
    fn drop(&mut self) {
        let _ = self.deregister();
    }
}
