//! Peers on this node over shared memory, the others over the network
//! (features `boot` and `shm`).
//!
//! An IA picks its transport before any peer is known, so the choice of
//! transport per peer sits above the IA: a [`Fabric`] opens the network IA
//! the application names and, when other processes of the job share this
//! node (the bootstrap's node map), an `shm` IA of a name unique to the
//! job. [`Fabric::ia_for`] tells which IA reaches a rank; [`Fabric::register`]
//! registers memory on both (as multirail registers on every rail), and the
//! one RMR context it gives carries both keys, so peers exchange one
//! context and each picks the key of the path it uses
//! ([`Fabric::context_for`]).
//!
//! Memory: a region that node-local peers write or read is best allocated
//! with [`MemRegion::shared`]; the shm backend then moves each transfer as
//! one copy through a mapping, at `memcpy` speed, where other memory takes
//! a system call per transfer. The network IA treats it as any region.
//!
//! Atomics: the shm backend executes them with CPU atomics at the target.
//! A word updated both by node-local peers over shm and by remote peers
//! over the network is coherent only where the network backend's atomics
//! also run on the target's CPU (tcp, and libfabric's software providers),
//! not with a NIC's (verbs): route atomics through [`Fabric::net`] for
//! every peer then, as the DSM runtime does.

use crate::boot::Bootstrap;
use crate::{Access, Ia, Lmr, MemRegion, Pz, Result, RmrContext};
use std::sync::Arc;

/// The network IA and, for the ranks of this node, an shm IA.
pub struct Fabric {
    me: usize,
    /// Keys in a network context (a multirail IA gives one per rail).
    net_keys: usize,
    local: Vec<bool>,
    net: Arc<dyn Ia>,
    net_pz: Arc<dyn Pz>,
    shm: Option<(Arc<dyn Ia>, Arc<dyn Pz>)>,
}

/// A region registered on every IA of a [`Fabric`].
pub struct Registered {
    net: Arc<dyn Lmr>,
    shm: Option<Arc<dyn Lmr>>,
}

impl Fabric {
    /// The network IA `net`, and an shm IA when `shm` is asked for and
    /// another rank of the job shares this node (its name comes from the
    /// job's id, so only this job's processes meet there).
    ///
    /// # Errors
    /// Opening the shm IA or a protection zone fails.
    pub fn open(boot: &Bootstrap, net: Arc<dyn Ia>, shm: bool) -> Result<Fabric> {
        let me = boot.rank();
        let nodes = boot.nodes();
        let node = nodes.node_of(me);
        let local: Vec<bool> =
            (0..boot.size()).map(|r| r != me && nodes.node_of(r) == node).collect();
        let net_pz = net.create_pz()?;
        let net_keys =
            net_pz.register_all(&MemRegion::new(64), Access::empty())?.rmr_context().keys().len();
        let shm = if shm && local.iter().any(|&l| l) {
            let ia = crate::open(&format!("shm:{}", shm_name(boot.job_id())))?;
            let pz = ia.create_pz()?;
            Some((ia, pz))
        } else {
            None
        };
        Ok(Fabric { me, net_keys, local, net, net_pz, shm })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// The network IA (every rank is reachable through it).
    pub fn net(&self) -> &Arc<dyn Ia> {
        &self.net
    }

    /// The protection zone of the network IA.
    pub fn net_pz(&self) -> &Arc<dyn Pz> {
        &self.net_pz
    }

    /// The shm IA, when other ranks share this node.
    pub fn shm_ia(&self) -> Option<&Arc<dyn Ia>> {
        self.shm.as_ref().map(|(i, _)| i)
    }

    /// The shm IA's protection zone, when there is one.
    pub fn shm_pz(&self) -> Option<&Arc<dyn Pz>> {
        self.shm.as_ref().map(|(_, p)| p)
    }

    /// Whether `rank` is reached over shared memory (another rank of this node).
    pub fn uses_shm(&self, rank: usize) -> bool {
        self.shm.is_some() && self.local.get(rank).copied().unwrap_or(false)
    }

    /// The IA that reaches `rank`.
    pub fn ia_for(&self, rank: usize) -> &Arc<dyn Ia> {
        match &self.shm {
            Some((ia, _)) if self.uses_shm(rank) => ia,
            _ => &self.net,
        }
    }

    /// The protection zone an EP to `rank` is created in.
    pub fn pz_for(&self, rank: usize) -> &Arc<dyn Pz> {
        match &self.shm {
            Some((_, pz)) if self.uses_shm(rank) => pz,
            _ => &self.net_pz,
        }
    }

    /// Registers `region` on every IA with `access`.
    ///
    /// # Errors
    /// A registration fails.
    pub fn register(&self, region: &Arc<MemRegion>, access: Access) -> Result<Registered> {
        let net = self.net_pz.register_all(region, access)?;
        let shm = match &self.shm {
            Some((_, pz)) => Some(pz.register_all(region, access)?),
            None => None,
        };
        Ok(Registered { net, shm })
    }

    /// The context a peer gave (from [`Registered::context`]) as the path
    /// to that peer uses it: its shm key for a rank of this node, its
    /// network keys otherwise.
    ///
    /// # Errors
    /// The context has no shm key where one is needed.
    pub fn context_for(&self, ctx: &RmrContext, rank: usize) -> Result<RmrContext> {
        let keys = ctx.keys();
        if self.uses_shm(rank) {
            match keys.get(self.net_keys) {
                Some(&k) => Ok(RmrContext::new(k, ctx.addr, ctx.len)),
                None => Err(crate::Error::invalid(format!("rank {rank}'s context has no shm key"))),
            }
        } else {
            self.net_context(ctx)
        }
    }

    /// The network keys of a context from [`Registered::context`] (what an
    /// EP of [`Fabric::net`] takes, whatever node the peer is on).
    ///
    /// # Errors
    /// Never for a context [`Registered::context`] made.
    pub fn net_context(&self, ctx: &RmrContext) -> Result<RmrContext> {
        let keys = ctx.keys();
        RmrContext::with_keys(&keys[..self.net_keys.min(keys.len())], ctx.addr, ctx.len)
    }
}

impl Registered {
    /// One context for every peer: the network keys (one per rail), then
    /// the shm key.
    ///
    /// # Errors
    /// The network IA has as many rails as a context has room for keys.
    pub fn context(&self) -> Result<RmrContext> {
        let n = self.net.rmr_context();
        match &self.shm {
            Some(s) => {
                let mut keys = n.keys().to_vec();
                keys.push(s.rmr_context().key());
                RmrContext::with_keys(&keys, n.addr, n.len)
            }
            None => Ok(n),
        }
    }

    /// The LMR for a DTO to `rank` through `fabric`.
    pub fn lmr_for(&self, fabric: &Fabric, rank: usize) -> &Arc<dyn Lmr> {
        match &self.shm {
            Some(s) if fabric.uses_shm(rank) => s,
            _ => &self.net,
        }
    }

    /// The network IA's LMR.
    pub fn net(&self) -> &Arc<dyn Lmr> {
        &self.net
    }
}

/// An shm name for job `job`: short, without `/`.
fn shm_name(job: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    job.hash(&mut h);
    format!("job-{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    #[test]
    fn shm_names_are_short_and_plain() {
        let n = super::shm_name(&"x/".repeat(100));
        assert!(n.len() <= 64 && !n.contains('/'), "{n}");
        assert_ne!(super::shm_name("a"), super::shm_name("b"));
    }
}
