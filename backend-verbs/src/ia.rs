//! The interface adapter: one device port with an IP address, its rdma_cm
//! event channel, and the thread that dispatches connection and async events.

use crate::ep::{EpCore, VerbsEp};
use crate::evd::VerbsEvd;
use crate::psp::{PspCore, VerbsPsp};
use crate::pz::VerbsPz;
use crate::spec::{Spec, VerbsConfig, link_speed_bps};
use crate::sys::cm::{CmId, EventChannel, device_of};
use crate::sys::device::{Ctx, Limits, device_names, local_ips};
use crate::sys::fd::{EventFd, poll_in, set_nonblocking};
use rmr_api::{Caps, Ep, EpEvds, Error, Evd, Ia, IaAttr, Psp, Pz, Result};
use std::any::Any;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where the events of one cm id go.
pub(crate) enum Route {
    /// An endpoint's id.
    Ep(Weak<EpCore>),
    /// A listening PSP.
    Psp(Weak<PspCore>),
}

/// The shared state of an IA (children hold it).
pub(crate) struct IaCore {
    pub(crate) attr: IaAttr,
    pub(crate) cfg: VerbsConfig,
    pub(crate) limits: Limits,
    pub(crate) ip: IpAddr,
    pub(crate) port: u8,
    pub(crate) ctx: Ctx,
    pub(crate) chan: Arc<EventChannel>,
    routes: Mutex<HashMap<usize, Route>>,
    wake: EventFd,
    thread: Mutex<Option<JoinHandle<()>>>,
    // Last: keeps librdmacm's device context (ctx) open.
    _anchor: CmId,
}

impl IaCore {
    pub(crate) fn route_add(&self, key: usize, r: Route) {
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).insert(key, r);
    }

    pub(crate) fn route_remove(&self, key: usize) {
        self.routes.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    }

    fn dispatch(&self, inc: crate::sys::cm::Incoming) {
        let r = {
            let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
            let key = if inc.new_id.is_some() { inc.listen } else { inc.id };
            match routes.get(&key) {
                Some(Route::Ep(w)) => w.upgrade().map(Target::Ep),
                Some(Route::Psp(w)) => w.upgrade().map(Target::Psp),
                None => None,
            }
        };
        match (r, inc.new_id) {
            (Some(Target::Psp(p)), Some(id)) => p.on_request(id, inc.event),
            (_, Some(id)) => {
                // Nobody listens any more: refuse, then destroy the id.
                let _ = id.reject(&[]);
            }
            (Some(Target::Ep(e)), None) => e.on_cm_event(inc.event),
            _ => {}
        }
    }
}

enum Target {
    Ep(Arc<EpCore>),
    Psp(Arc<PspCore>),
}

impl Drop for IaCore {
    fn drop(&mut self) {
        self.wake.notify();
        let h = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

fn event_thread(ia: Weak<IaCore>, chan: Arc<EventChannel>, async_fd: i32, wake: i32) {
    loop {
        let ready = poll_in(&[chan.fd(), async_fd, wake], Some(Duration::from_millis(500)));
        if ready[2] {
            return;
        }
        let Some(core) = ia.upgrade() else { return };
        while let Some(inc) = chan.next() {
            core.dispatch(inc);
        }
        while let Some(ev) = core.ctx.next_async() {
            crate::ep::on_async(core.ctx, ev);
        }
    }
}

/// Finds the IP address rdma_cm binds to `name`/`port` (IPv4 first).
fn ip_of(chan: &Arc<EventChannel>, name: &str, port: u8) -> Option<IpAddr> {
    let mut ips: Vec<IpAddr> = local_ips().into_iter().filter(|ip| !ip.is_loopback()).collect();
    ips.sort_by_key(|ip| ip.is_ipv6());
    ips.into_iter().find(|&ip| device_of(chan, ip).is_some_and(|(n, p)| n == name && p == port))
}

/// One rail of the verbs backend: a device port, addressed by IP.
pub struct VerbsIa {
    pub(crate) core: Arc<IaCore>,
}

impl VerbsIa {
    /// Opens the IA a spec names, with `cfg`.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when there is no usable device (no kernel verbs,
    /// no device, no such device, no IP address on it, no rdma_cm);
    /// `Error::Backend` for failing verbs calls.
    pub fn open(spec: &Spec, cfg: VerbsConfig) -> Result<VerbsIa> {
        let names = device_names()?;
        if let Spec::Device { name, .. } = spec {
            if !names.iter().any(|n| n == name) {
                return Err(Error::NoDevice {
                    what: format!("no RDMA device named `{name}` (present: {})", names.join(", ")),
                });
            }
        }
        let chan = EventChannel::create()?;
        let ip = match spec {
            Spec::Addr(ip) => *ip,
            Spec::Device { name, port } => {
                ip_of(&chan, name, *port).ok_or_else(|| Error::NoDevice {
                    what: format!(
                        "{name} port {port} has no IP address, which rdma_cm needs \
                         (configure IPoIB or the RoCE netdev, or use `verbs:<ip>`)"
                    ),
                })?
            }
        };
        let anchor = CmId::create(&chan)?;
        anchor.bind(SocketAddr::new(ip, 0))?;
        let ctx = anchor.ctx().ok_or_else(|| Error::NoDevice {
            what: format!("{ip} is not an address of an RDMA device"),
        })?;
        let port = anchor.port_num().max(1);
        let limits = ctx.limits(port)?;
        if !limits.port_active {
            return Err(Error::NoDevice {
                what: format!("{} port {port} is not active", limits.name),
            });
        }
        set_nonblocking(ctx.async_fd())?;
        let sq = cfg.sq_depth.min(limits.max_qp_wr.max(2) as u32);
        let mut caps = Caps::RDMA_READ;
        if !limits.iwarp {
            caps |= Caps::WRITE_IMM;
            if limits.atomics {
                caps |= Caps::ATOMICS;
            }
        }
        let attr = IaAttr {
            provider: "verbs".into(),
            address: ip.to_string(),
            max_msg_size: u64::from(limits.max_msg_sz),
            max_sges: cfg.max_sge.min(limits.max_sge.max(1) as u32) as usize,
            max_dtos: (sq - 1) as usize,
            max_private_data: crate::private_data::MAX_USER,
            caps,
            link_speed_bps: link_speed_bps(limits.active_width, limits.active_speed),
        };
        let wake = EventFd::new()?;
        let core = Arc::new(IaCore {
            attr,
            cfg,
            limits,
            ip,
            port,
            ctx,
            chan: chan.clone(),
            routes: Mutex::new(HashMap::new()),
            wake,
            thread: Mutex::new(None),
            _anchor: anchor,
        });
        let (weak, afd, wfd) = (Arc::downgrade(&core), ctx.async_fd(), core.wake.raw());
        let h = std::thread::Builder::new()
            .name(format!("rmr-verbs-cm-{ip}"))
            .spawn(move || event_thread(weak, chan, afd, wfd))
            .map_err(|e| Error::io("spawn rdma_cm event thread", e))?;
        *core.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        Ok(VerbsIa { core })
    }

    /// The device name (`mlx5_0`) and port.
    pub fn device(&self) -> (String, u8) {
        (self.core.limits.name.clone(), self.core.port)
    }
}

pub(crate) fn verbs_evd(evd: &Arc<dyn Evd>, ia: &Arc<IaCore>) -> Result<Arc<VerbsEvd>> {
    let v = evd
        .as_any()
        .downcast_ref::<VerbsEvd>()
        .and_then(VerbsEvd::arc)
        .ok_or_else(|| Error::invalid("the verbs backend needs EVDs created by a verbs IA"))?;
    if v.ia.ctx != ia.ctx {
        return Err(Error::invalid("EVD of another RDMA device"));
    }
    Ok(v)
}

impl Ia for VerbsIa {
    fn attr(&self) -> &IaAttr {
        &self.core.attr
    }

    fn create_pz(&self) -> Result<Arc<dyn Pz>> {
        Ok(Arc::new(VerbsPz::new(self.core.clone())?))
    }

    fn create_evd(&self) -> Result<Arc<dyn Evd>> {
        Ok(VerbsEvd::create(self.core.clone())?)
    }

    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn Ep>> {
        let pz = pz
            .as_any()
            .downcast_ref::<VerbsPz>()
            .ok_or_else(|| Error::invalid("PZ of another provider"))?;
        if !Arc::ptr_eq(&pz.core.ia, &self.core) {
            return Err(Error::invalid("PZ of another IA"));
        }
        let req = verbs_evd(&evds.request, &self.core)?;
        let recv = verbs_evd(&evds.recv, &self.core)?;
        let conn = verbs_evd(&evds.conn, &self.core)?;
        Ok(Arc::new(VerbsEp::create(self.core.clone(), pz.core.clone(), req, recv, conn)?))
    }

    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>> {
        let evd = verbs_evd(evd, &self.core)?;
        Ok(Arc::new(VerbsPsp::listen(self.core.clone(), service, evd)?))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
