//! A process's view of the world: joined by rank, it gives an endpoint to
//! any rank — direct inside the cluster, through the bridge(s) across — and
//! a barrier over both clusters.

use crate::barrier::Barrier;
use crate::client::ia::{BridgeIa, ClientConfig};
use crate::error::{Result, ZipperError};
use crate::world::{WorldDesc, nearest};
use multirail::{MrConfig, MrIa};
use rmr_api::{Ep, EpEvds, Error, Evd, Event, Ia, Psp, Pz};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"ZWR1";

/// How a process joins its world.
#[derive(Clone, Debug)]
pub struct JoinConfig {
    /// Multirail settings when a peer is reached over several bridges.
    pub multirail: MrConfig,
    /// Bridged endpoints' settings.
    pub client: ClientConfig,
    /// Use at most this many bridges (all when `None`).
    pub bridges: Option<usize>,
    /// How long [`World::ep`] tries (peers may start later).
    pub timeout: Duration,
}

impl JoinConfig {
    /// The defaults with the environment applied: bridged endpoints'
    /// `RMR_ZIP_*` ([`ClientConfig::from_env`]) and the multirail layer's
    /// `RMR_MR_*` (over this config's 64 KiB threshold). What a process
    /// started by a job launcher joins with.
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming a variable whose value does
    /// not parse or is out of range.
    pub fn from_env() -> rmr_api::Result<JoinConfig> {
        let mut multirail = MrConfig { threshold: 64 << 10, ..MrConfig::default() };
        multirail.apply(&rmr_api::settings::Given::env())?;
        Ok(JoinConfig { multirail, client: ClientConfig::from_env()?, ..JoinConfig::default() })
    }
}

impl Default for JoinConfig {
    /// The plain defaults, whatever the environment says (see
    /// [`JoinConfig::from_env`]).
    fn default() -> Self {
        JoinConfig {
            multirail: MrConfig { threshold: 64 << 10, ..MrConfig::default() },
            client: ClientConfig::default(),
            bridges: None,
            timeout: Duration::from_secs(30),
        }
    }
}

/// A connection to one peer rank: the endpoint, the protection zone to
/// register its memory in, and the EVD it reports to.
pub struct Peer {
    /// The peer's global rank.
    pub rank: u32,
    /// Whether the connection goes through the bridge(s).
    pub bridged: bool,
    /// The endpoint.
    pub ep: Arc<dyn Ep>,
    /// Register memory used with `ep` here.
    pub pz: Arc<dyn Pz>,
    /// Every event of `ep` (requests, receives, connection).
    pub evd: Arc<dyn Evd>,
}

struct Net {
    ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
}

struct Inbox {
    peers: Mutex<HashMap<u32, Arc<Peer>>>,
    cv: Condvar,
}

/// One process joined to its world.
pub struct World {
    desc: WorldDesc,
    rank: u32,
    cfg: JoinConfig,
    direct: Net,
    bridged: Option<Net>,
    psps: Vec<Arc<dyn Psp>>,
    inbox: Arc<Inbox>,
    peers: Mutex<HashMap<u32, Arc<Peer>>>,
    barrier: Mutex<Option<Barrier>>,
    stop: Arc<AtomicBool>,
}

fn listen(
    net: &Net,
    port: u16,
    inbox: &Arc<Inbox>,
    stop: &Arc<AtomicBool>,
    bridged: bool,
) -> Result<Arc<dyn Psp>> {
    let evd = net.ia.create_evd()?;
    let psp = net.ia.create_psp(port, &evd)?;
    let (ia, pz, inbox, stop) = (net.ia.clone(), net.pz.clone(), inbox.clone(), stop.clone());
    std::thread::Builder::new()
        .name("rmr-zip-world".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let Ok(Event::ConnectionRequest(cr)) =
                    evd.wait(Some(Duration::from_millis(100)), 1)
                else {
                    continue;
                };
                let pd = cr.private_data();
                if pd.len() < 8 || &pd[..4] != MAGIC {
                    let _ = cr.reject(b"zipper world: not a world peer");
                    continue;
                }
                let rank = u32::from_le_bytes(pd[4..8].try_into().expect("4 bytes"));
                let made = (|| -> rmr_api::Result<Arc<Peer>> {
                    let evd = ia.create_evd()?;
                    let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
                    cr.accept(&ep, b"")?;
                    Ok(Arc::new(Peer { rank, bridged, ep, pz: pz.clone(), evd }))
                })();
                if let Ok(p) = made {
                    inbox.peers.lock().unwrap_or_else(|e| e.into_inner()).insert(rank, p);
                    inbox.cv.notify_all();
                }
            }
        })
        .map_err(|e| Error::io("spawn world listener", e))?;
    Ok(psp)
}

impl World {
    /// Joins `desc` as `rank`: opens this process's rails and listens for
    /// its peers (direct on `port + 1`, bridged on `port`).
    ///
    /// # Errors
    /// An unknown rank, or rails that cannot be opened or listened on.
    pub fn join(desc: WorldDesc, rank: u32, cfg: JoinConfig) -> Result<World> {
        crate::register();
        let me = desc.process(rank)?.clone();
        let open = |addr: std::net::IpAddr| rmr_api::open(&format!("{}:{addr}", me.backend));
        let dia = open(me.addrs[0])?;
        let direct = Net { pz: dia.create_pz()?, ia: dia };
        let nb = cfg.bridges.unwrap_or(desc.bridges.len()).min(desc.bridges.len());
        let bridged = if nb == 0 {
            None
        } else {
            let mut rails: Vec<Arc<dyn Ia>> = Vec::new();
            for b in &desc.bridges[..nb] {
                let near = b.addr(me.cluster);
                // One of nb rails (see rmr_api::provider::with_rail_share).
                let inner =
                    rmr_api::provider::with_rail_share(nb, || open(nearest(&me.addrs, near)))?;
                rails.push(BridgeIa::new(
                    inner,
                    Some((near.to_string(), b.port)),
                    cfg.client.clone(),
                ));
            }
            let ia: Arc<dyn Ia> = if rails.len() == 1 {
                rails.pop().expect("one rail")
            } else {
                MrIa::new(rails, cfg.multirail.clone())?
            };
            Some(Net { pz: ia.create_pz()?, ia })
        };
        let inbox = Arc::new(Inbox { peers: Mutex::default(), cv: Condvar::new() });
        let stop = Arc::new(AtomicBool::new(false));
        let mut psps = vec![listen(&direct, me.port + 1, &inbox, &stop, false)?];
        if let Some(b) = &bridged {
            psps.push(listen(b, me.port, &inbox, &stop, true)?);
        }
        Ok(World {
            desc,
            rank,
            cfg,
            direct,
            bridged,
            psps,
            inbox,
            peers: Mutex::default(),
            barrier: Mutex::new(None),
            stop,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of processes in both clusters.
    pub fn size(&self) -> usize {
        self.desc.size()
    }

    /// The world description.
    pub fn desc(&self) -> &WorldDesc {
        &self.desc
    }

    /// Whether `peer` is reached through the bridge(s).
    ///
    /// # Errors
    /// [`ZipperError::NoRank`].
    pub fn is_bridged(&self, peer: u32) -> Result<bool> {
        Ok(self.desc.process(peer)?.cluster != self.desc.process(self.rank)?.cluster)
    }

    /// The IA a bridged endpoint to a peer uses (a multirail IA over every
    /// bridge when there are several), the peer's remote address string and
    /// service: what a program that manages its own endpoints (rmr-bench)
    /// passes to `create_ep` and `connect`.
    ///
    /// # Errors
    /// [`ZipperError::NoRank`]; `InvalidArgument` when the world has no bridge.
    pub fn bridged_route(&self, peer: u32) -> Result<(Arc<dyn Ia>, String, u16)> {
        let p = self.desc.process(peer)?;
        let net =
            self.bridged.as_ref().ok_or_else(|| Error::invalid("this world has no bridge"))?;
        let nb = self.cfg.bridges.unwrap_or(self.desc.bridges.len()).min(self.desc.bridges.len());
        let remote: Vec<String> = self.desc.bridges[..nb]
            .iter()
            .map(|b| nearest(&p.addrs, b.addr(p.cluster)).to_string())
            .collect();
        Ok((net.ia.clone(), remote.join(","), p.port))
    }

    /// The endpoint to rank `peer`, made on first use. Both ranks call it:
    /// the lower rank connects, the higher accepts.
    ///
    /// # Errors
    /// [`ZipperError::NoRank`], or the connection could not be made in time.
    pub fn ep(&self, peer: u32) -> Result<Arc<Peer>> {
        if peer == self.rank {
            return Err(Error::invalid("no endpoint to oneself").into());
        }
        if let Some(p) = self.peers.lock().unwrap_or_else(|e| e.into_inner()).get(&peer) {
            return Ok(p.clone());
        }
        let bridged = self.is_bridged(peer)?;
        let p = if self.rank < peer { self.connect(peer, bridged)? } else { self.accepted(peer)? };
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).insert(peer, p.clone());
        Ok(p)
    }

    fn connect(&self, peer: u32, bridged: bool) -> Result<Arc<Peer>> {
        let p = self.desc.process(peer)?;
        let (net, remote, port) = if bridged {
            let (_, remote, port) = self.bridged_route(peer)?;
            (self.bridged.as_ref().expect("bridged"), remote, port)
        } else {
            let near = nearest(&p.addrs, self.desc.process(self.rank)?.addrs[0]);
            (&self.direct, near.to_string(), p.port + 1)
        };
        let mut pd = MAGIC.to_vec();
        pd.extend_from_slice(&self.rank.to_le_bytes());
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            let evd = net.ia.create_evd()?;
            let ep = net.ia.create_ep(&net.pz, &EpEvds::single(&evd))?;
            match ep.connect(&remote, port, &pd, Duration::from_secs(10)) {
                Ok(_) => {
                    return Ok(Arc::new(Peer { rank: peer, bridged, ep, pz: net.pz.clone(), evd }));
                }
                Err(e) if Instant::now() >= deadline => return Err(e.into()),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn accepted(&self, peer: u32) -> Result<Arc<Peer>> {
        let deadline = Instant::now() + self.cfg.timeout;
        let mut m = self.inbox.peers.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(p) = m.remove(&peer) {
                return Ok(p);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ZipperError::Rmr(Error::Timeout));
            }
            m = self.inbox.cv.wait_timeout(m, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Waits until every process of both clusters has entered the barrier
    /// (a dissemination barrier over sends on this world's endpoints).
    ///
    /// # Errors
    /// A broken connection or a timeout.
    pub fn barrier(&self) -> Result<()> {
        let mut b = self.barrier.lock().unwrap_or_else(|e| e.into_inner());
        if b.is_none() {
            *b = Some(Barrier::new(self)?);
        }
        b.as_mut().expect("made").wait(self.cfg.timeout)?;
        Ok(())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for p in &self.psps {
            p.close();
        }
        *self.barrier.lock().unwrap_or_else(|e| e.into_inner()) = None;
        for p in self.peers.lock().unwrap_or_else(|e| e.into_inner()).values() {
            let _ = p.ep.disconnect();
        }
    }
}

/// A bridged rail and the peer's address behind its bridge.
pub type BridgeRail = (Arc<dyn Ia>, Option<String>);

/// One bridged rail per bridge (the first `nbridges`) for rank `rank`: a
/// [`BridgeIa`] over the rank's address nearest that bridge, and — when
/// `peer` is given — the peer's address on the bridge's far side. For
/// programs that manage their own endpoints (rmr-bench): join the rails
/// with `MrIa::new` to stripe over several bridges.
///
/// # Errors
/// An unknown rank, or a rail that cannot be opened.
pub fn bridge_rails(
    desc: &WorldDesc,
    rank: u32,
    peer: Option<u32>,
    nbridges: usize,
    cfg: &ClientConfig,
) -> Result<Vec<BridgeRail>> {
    crate::register();
    let me = desc.process(rank)?;
    let p = peer.map(|p| desc.process(p)).transpose()?;
    let mut out = Vec::new();
    for b in desc.bridges.iter().take(nbridges) {
        let near = b.addr(me.cluster);
        let inner = rmr_api::open(&format!("{}:{}", me.backend, nearest(&me.addrs, near)))?;
        let connect = peer.map(|_| (near.to_string(), b.port));
        let ia: Arc<dyn Ia> = BridgeIa::new(inner, connect, cfg.clone());
        let remote = p.map(|p| nearest(&p.addrs, b.addr(p.cluster)).to_string());
        out.push((ia, remote));
    }
    Ok(out)
}
