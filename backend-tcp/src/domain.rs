//! What the objects of one IA share: [`IaShared`] (its attributes,
//! address, settings and the key table), the memory it registers
//! ([`TcpPz`], [`TcpLmr`]), and the key table the receive path checks
//! every remote access against.

use crate::config::TcpConfig;
use crate::engine::Engine;
use rmr_api::provider::SoftEvd;
use rmr_api::{Access, Error, Evd, IaAttr, Lmr, MemRegion, Pz, Result, RmrContext};
use std::any::Any;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// A registered region as the receive path sees it.
pub(crate) use rmr_api::provider::LmrRecord as LmrInner;

/// Key -> region, per IA.
#[derive(Default)]
pub(crate) struct KeyTable {
    map: RwLock<HashMap<u64, Arc<LmrInner>, BuildHasherDefault<KeyHasher>>>,
}

/// Hashes a key as itself. Keys are drawn at random (`getrandom`, never by
/// a peer), so their bits are already uniform, and a peer's lookups insert
/// nothing: no input a peer sends can crowd one bucket. The table's
/// default hasher (SipHash, keyed against such crowding) cost a hundred
/// instructions on every remote access.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; any other input still hashes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = k;
    }
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
    /// The IA's progress engine, shared by all its endpoints.
    pub(crate) engine: Arc<Engine>,
    pub(crate) ip: IpAddr,
    pub(crate) keys: KeyTable,
    pub(crate) cfg: TcpConfig,
}

pub(crate) fn soft_evd(evd: &Arc<dyn Evd>) -> Result<()> {
    if evd.as_any().downcast_ref::<SoftEvd>().is_none() {
        return Err(Error::invalid("the tcp backend needs EVDs created by a tcp IA (SoftEvd)"));
    }
    Ok(())
}

/// A protection zone of the TCP backend.
pub struct TcpPz {
    pub(crate) id: u64,
    pub(crate) ia: Arc<IaShared>,
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

impl TcpLmr {
    /// What a post reads from this LMR, field by field (see
    /// [`rmr_api::provider::check_and_place`]).
    pub(crate) fn facts(&self) -> rmr_api::provider::LmrFacts<'_> {
        self.inner.facts()
    }
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
