//! Every process connected to every other, and to itself: one EP per peer
//! plus a loopback EP, all on the network IA and its PZ, found through the
//! bootstrap's allgather; and, for page data to the other processes of
//! this node, one shm EP each. One EVD takes the completions of all of them.
//!
//! Many operations may be in flight at once, from many threads: a thread
//! posts its DTOs (each with a fresh cookie) and waits for their cookies
//! with [`Mesh::wait_all`]. Whoever holds the *poller* token reads the EVD
//! and files every completion under its cookie; the others sleep on a
//! condition variable until their completions are filed or the token is
//! free. No lock is held while a thread is inside the EVD's wait except
//! the token itself, so a thread whose completions arrived never waits for
//! another thread's network round trip.
//!
//! With a progress thread (the runtime's `Progress` setting) one thread of the runtime holds the token for good: it sleeps
//! in the EVD's wait, so what peers ask of this process — the RDMA reads
//! of its home pages, their diffs, atomics on the words it holds — is
//! served while the application computes, not when it next waits (on a
//! transport whose target side runs on the CPU, as TCP's does).

use super::{DsmError, Result};
use rmr::boot::Bootstrap;
use rmr::node::Fabric;
use rmr::{DtoCompletion, Ep, EpEvds, Error, Evd, Event, Ia, Psp, RmrContext};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long one remote operation may take before the runtime gives up.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the poller waits in the EVD before it lets another thread take
/// the token (a thread whose completions a sleeping poller filed wakes at
/// once: filing notifies).
const POLL_SLICE: Duration = Duration::from_millis(2);

/// Completions filed by cookie, and the first failure of a DTO nobody waits
/// for (a suppressed write reports only its failure; kept for good, see
/// `Router::wait_all`).
#[derive(Default)]
struct Filed {
    done: HashMap<u64, DtoCompletion>,
    orphan_error: Option<DtoCompletion>,
    /// The progress thread met an error reading the EVD and stopped.
    broken: Option<String>,
}

/// The completion side, shared with the progress thread.
struct Router {
    evd: Arc<dyn Evd>,
    filed: Mutex<Filed>,
    filed_cv: Condvar,
    poller: Mutex<()>,
    /// A progress thread holds the poller token.
    helped: bool,
    stop: AtomicBool,
}

pub(crate) struct Mesh {
    pub(crate) ia: Arc<dyn Ia>,
    /// The network IA and, for the processes of this node, the shm IA.
    pub(crate) fabric: Fabric,
    /// `data[p]`: the shm EP to process `p` of this node (page data), if any.
    data: Vec<Option<Arc<dyn Ep>>>,
    /// The shm service point (kept while its EPs live).
    _shm_psp: Option<Arc<dyn Psp>>,
    router: Arc<Router>,
    helper: Option<std::thread::JoinHandle<()>>,
    /// Connection events (kept so the EPs' EVD lives as long as they do).
    _cevd: Arc<dyn Evd>,
    _psp: Arc<dyn Psp>,
    /// `eps[p]`: the EP to process `p`; `eps[me]` is the loopback EP (this
    /// process's own memory through the backend, for atomics).
    eps: Vec<Arc<dyn Ep>>,
    /// The accepting side of the loopback pair (kept alive, never posted on).
    _loop_peer: Arc<dyn Ep>,
    next_cookie: AtomicU64,
}

impl Mesh {
    /// Connects to every process of the job and to itself; with `helper`,
    /// starts the progress thread.
    pub(crate) fn connect(boot: &Bootstrap, fabric: Fabric, helper: bool) -> Result<Mesh> {
        let (me, n) = (boot.rank(), boot.size());
        let ia = fabric.net().clone();
        let pz = fabric.net_pz().clone();
        let evd = ia.create_evd()?;
        let cevd = ia.create_evd()?;
        let psp_evd = ia.create_evd()?;
        let psp = ia.create_psp(0, &psp_evd)?;
        let mut card = psp.service().to_le_bytes().to_vec();
        card.extend_from_slice(psp.address().as_bytes());
        let cards = boot.allgather(&card)?;
        let evds = EpEvds { request: evd.clone(), recv: evd.clone(), conn: cevd.clone() };
        // Lower ranks and this process itself connect to us: accept them in
        // a thread while we connect to ourselves and the higher ranks, so
        // nobody waits in a cycle.
        let acceptor = {
            let (ia, pz, evds, psp_evd) = (ia.clone(), pz.clone(), evds.clone(), psp_evd.clone());
            std::thread::spawn(move || -> Result<Vec<(usize, Arc<dyn Ep>)>> {
                let mut got = Vec::new();
                while got.len() < me + 1 {
                    match psp_evd.wait(Some(OP_TIMEOUT), 1)? {
                        Event::ConnectionRequest(cr) => {
                            let pd = cr.private_data();
                            let Some(from) = pd
                                .get(..8)
                                .map(|b| u64::from_le_bytes(b.try_into().expect("8")) as usize)
                            else {
                                let _ = cr.reject(b"not a dsm peer");
                                continue;
                            };
                            let ep = ia.create_ep(&pz, &evds)?;
                            cr.accept(&ep, b"dsm")?;
                            got.push((from, ep));
                        }
                        _ => continue,
                    }
                }
                Ok(got)
            })
        };
        let mut eps: Vec<Option<Arc<dyn Ep>>> = vec![None; n];
        for (p, c) in cards.iter().enumerate().skip(me) {
            let port = u16::from_le_bytes(
                c.get(..2)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| DsmError::Protocol(format!("card of rank {p}")))?,
            );
            let addr = String::from_utf8_lossy(&c[2..]).to_string();
            let ep = ia.create_ep(&pz, &evds)?;
            ep.connect(&addr, port, &(me as u64).to_le_bytes(), OP_TIMEOUT)?;
            eps[p] = Some(ep);
        }
        let accepted = acceptor
            .join()
            .map_err(|_| DsmError::Protocol("acceptor thread panicked".into()))??;
        let mut loop_peer = None;
        for (from, ep) in accepted {
            if from == me && loop_peer.is_none() {
                loop_peer = Some(ep);
            } else if from < me && eps[from].is_none() {
                eps[from] = Some(ep);
            } else {
                return Err(DsmError::Protocol(format!("unexpected connection from rank {from}")));
            }
        }
        let eps = eps
            .into_iter()
            .enumerate()
            .map(|(p, e)| e.ok_or_else(|| DsmError::Protocol(format!("no endpoint to rank {p}"))))
            .collect::<Result<Vec<_>>>()?;
        let loop_peer =
            loop_peer.ok_or_else(|| DsmError::Protocol("no loopback connection".into()))?;
        let (data, shm_psp) = connect_local(boot, &fabric, &evds)?;
        let router = Arc::new(Router {
            evd,
            filed: Mutex::new(Filed::default()),
            filed_cv: Condvar::new(),
            poller: Mutex::new(()),
            helped: helper,
            stop: AtomicBool::new(false),
        });
        let helper = if helper {
            let r = router.clone();
            Some(
                std::thread::Builder::new()
                    .name("rmr-dsm-progress".into())
                    .spawn(move || r.serve())
                    .map_err(|e| DsmError::Protocol(format!("progress thread: {e}")))?,
            )
        } else {
            None
        };
        Ok(Mesh {
            ia,
            fabric,
            data,
            _shm_psp: shm_psp,
            router,
            helper,
            _cevd: cevd,
            _psp: psp,
            eps,
            _loop_peer: loop_peer,
            next_cookie: AtomicU64::new(1),
        })
    }

    /// The EP to process `p` (this process's own: the loopback EP).
    pub(crate) fn ep(&self, p: usize) -> Result<&Arc<dyn Ep>> {
        self.eps.get(p).ok_or_else(|| DsmError::Protocol(format!("no endpoint to rank {p}")))
    }

    /// The EP for page data to process `p`, and whether it is an shm EP.
    pub(crate) fn data_ep(&self, p: usize) -> Result<(&Arc<dyn Ep>, bool)> {
        match self.data.get(p) {
            Some(Some(ep)) => Ok((ep, true)),
            _ => Ok((self.ep(p)?, false)),
        }
    }

    /// A fresh cookie for a DTO whose completion someone will wait for.
    pub(crate) fn cookie(&self) -> u64 {
        self.next_cookie.fetch_add(1, Ordering::Relaxed)
    }

    /// Posts with `post`, retrying while the EP's send queue is full
    /// ([`Error::QueueFull`]: a release that sends many diff runs at once)
    /// until it drains, making progress meanwhile (the progress thread, or
    /// this thread) for at most [`OP_TIMEOUT`].
    pub(crate) fn post(&self, mut post: impl FnMut() -> rmr::Result<()>) -> Result<()> {
        let deadline = Instant::now() + OP_TIMEOUT;
        let mut retries = 0u64;
        loop {
            match post() {
                Err(Error::QueueFull) if Instant::now() < deadline => {
                    retries += 1;
                    if retries == 1 {
                        tracing::debug!(target: "rmr::dsm", "send queue full; making room and retrying");
                    }
                    self.router.make_room()?;
                }
                r => {
                    if retries > 0 {
                        tracing::debug!(target: "rmr::dsm", retries, ok = r.is_ok(), "post retried");
                    }
                    return Ok(r?);
                }
            }
        }
    }

    /// Posts one DTO with `post(cookie)` and waits for its completion.
    pub(crate) fn run(
        &self,
        mut post: impl FnMut(u64) -> rmr::Result<()>,
    ) -> Result<DtoCompletion> {
        let c = self.cookie();
        self.post(|| post(c))?;
        let mut v = self.wait_all(&[c])?;
        Ok(v.pop().expect("one completion"))
    }

    /// Waits until the DTOs posted with `cookies` have all completed;
    /// returns their completions in the same order. The first failed one
    /// (or a failure of a suppressed DTO nobody waits for) is the error.
    pub(crate) fn wait_all(&self, cookies: &[u64]) -> Result<Vec<DtoCompletion>> {
        self.router.wait_all(cookies)
    }

    /// Exchanges one RMR context per process through the bootstrap.
    pub(crate) fn exchange(boot: &Bootstrap, mine: &RmrContext) -> Result<Vec<RmrContext>> {
        boot.allgather(&mine.to_bytes())?
            .iter()
            .map(|b| RmrContext::from_bytes(b).map_err(DsmError::from))
            .collect()
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        self.router.stop.store(true, Ordering::Release);
        if let Some(h) = self.helper.take() {
            let _ = h.join();
        }
    }
}

impl Router {
    /// The progress thread: holds the poller token and files completions
    /// until the mesh is dropped.
    fn serve(&self) {
        let _token = self.poller.lock().unwrap_or_else(|e| e.into_inner());
        while !self.stop.load(Ordering::Acquire) {
            let r = self.poll_once();
            self.wake_waiters();
            if let Err(e) = r {
                // Every waiter fails with it from now on.
                self.filed.lock().unwrap_or_else(|e| e.into_inner()).broken = Some(e.to_string());
                self.filed_cv.notify_all();
                return;
            }
        }
    }

    /// Wakes the threads waiting for completions (something was filed, or
    /// the poller token is free). Taking the filing lock first: a waiter
    /// holds it from its look at the token until it sleeps, so it cannot
    /// miss this wake-up.
    fn wake_waiters(&self) {
        drop(self.filed.lock().unwrap_or_else(|e| e.into_inner()));
        self.filed_cv.notify_all();
    }

    /// Lets a full send queue drain: the progress thread sends what is
    /// queued while this thread naps; without one, this thread drives the
    /// EVD once (or naps while another thread does).
    fn make_room(&self) -> Result<()> {
        if !self.helped
            && let Ok(token) = self.poller.try_lock()
        {
            let r = self.poll_once();
            drop(token);
            self.wake_waiters();
            return r;
        }
        std::thread::sleep(Duration::from_micros(50));
        Ok(())
    }

    fn wait_all(&self, cookies: &[u64]) -> Result<Vec<DtoCompletion>> {
        let mut got: Vec<Option<DtoCompletion>> = vec![None; cookies.len()];
        let mut missing = cookies.len();
        let deadline = Instant::now() + OP_TIMEOUT;
        loop {
            {
                let mut f = self.filed.lock().unwrap_or_else(|e| e.into_inner());
                // Kept, not taken: a suppressed DTO is a diff run, whose
                // failure means writes that never reached their home. Every
                // wait from then on fails with it, the releases that sent
                // runs among them (not only whichever wait came first), so
                // this process takes part in no more synchronisation.
                if let Some(e) = f.orphan_error {
                    e.result()?;
                }
                if let Some(why) = &f.broken {
                    return Err(DsmError::Protocol(format!("progress thread stopped: {why}")));
                }
                for (slot, c) in got.iter_mut().zip(cookies) {
                    if slot.is_none()
                        && let Some(d) = f.done.remove(c)
                    {
                        *slot = Some(d);
                        missing -= 1;
                    }
                }
                if missing == 0 {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(DsmError::Rmr(Error::Timeout));
                }
                if self.helped {
                    let _ = self
                        .filed_cv
                        .wait_timeout(f, POLL_SLICE)
                        .unwrap_or_else(|e| e.into_inner());
                } else if let Ok(token) = self.poller.try_lock() {
                    drop(f);
                    let r = self.poll_once();
                    drop(token);
                    self.wake_waiters();
                    r?;
                } else {
                    // Someone else polls: sleep until it files something
                    // (or gives the token up, which also notifies).
                    let _ = self
                        .filed_cv
                        .wait_timeout(f, POLL_SLICE)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
        let out: Vec<DtoCompletion> =
            got.into_iter().map(|c| c.expect("every one filed")).collect();
        for c in &out {
            c.result()?;
        }
        Ok(out)
    }

    /// One wait on the EVD (the caller holds the poller token): files what
    /// arrives, the rest of what is queued too, without blocking again. The
    /// progress thread blocks at once (no spin: it would take the CPU the
    /// application computes on); a waiting application thread spins first,
    /// as the EVD's own wait does.
    fn poll_once(&self) -> Result<()> {
        let first = if self.helped {
            let stop = || self.stop.load(Ordering::Acquire);
            self.evd.progress_until(Some(POLL_SLICE), Some(Duration::ZERO), &stop);
            self.evd.dequeue()
        } else {
            match self.evd.wait(Some(POLL_SLICE), 1) {
                Ok(ev) => Some(ev),
                Err(Error::Timeout) => None,
                Err(e) => return Err(e.into()),
            }
        };
        let mut f = self.filed.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = |ev: Event| {
            if let Event::Dto(c) = ev {
                if c.cookie.0 == 0 {
                    // A suppressed DTO reports only a failure.
                    if !c.status.is_ok() && f.orphan_error.is_none() {
                        f.orphan_error = Some(c);
                    }
                } else {
                    f.done.insert(c.cookie.0, c);
                }
            }
        };
        if let Some(ev) = first {
            file(ev);
            while let Some(ev) = self.evd.dequeue() {
                file(ev);
            }
        }
        Ok(())
    }
}

/// The shm EPs to the other processes of this node (all of the job's
/// processes take part in the exchange, those without any too). Their
/// completions go to the network EPs' EVDs, which must then be software
/// queues (the shm backend's kind); where they are not, no shm EP is made
/// and page data goes over the network.
#[allow(clippy::type_complexity)]
fn connect_local(
    boot: &Bootstrap,
    fabric: &Fabric,
    evds: &EpEvds,
) -> Result<(Vec<Option<Arc<dyn Ep>>>, Option<Arc<dyn Psp>>)> {
    let (me, n) = (boot.rank(), boot.size());
    let soft = |e: &Arc<dyn Evd>| e.as_any().is::<rmr::provider::SoftEvd>();
    let all_soft = soft(&evds.request) && soft(&evds.recv) && soft(&evds.conn);
    let shm = fabric.shm_ia().zip(fabric.shm_pz()).filter(|_| all_soft);
    if fabric.shm_ia().is_some() && shm.is_none() {
        tracing::info!(target: "rmr::dsm", "the network's EVDs are not software queues: page data to this node's processes goes over the network");
    }
    let (psp, psp_evd) = match shm {
        Some((ia, _)) => {
            let pevd = ia.create_evd()?;
            (Some(ia.create_psp(0, &pevd)?), Some(pevd))
        }
        None => (None, None),
    };
    let card = psp.as_ref().map_or_else(Vec::new, |p| {
        let mut c = p.service().to_le_bytes().to_vec();
        c.extend_from_slice(p.address().as_bytes());
        c
    });
    let cards = boot.allgather(&card)?;
    let mut data: Vec<Option<Arc<dyn Ep>>> = vec![None; n];
    let (Some((ia, pz)), Some(pevd)) = (shm, psp_evd) else { return Ok((data, psp)) };
    // The lower ranks of this node connect to us; we connect to the higher.
    let lower = (0..me).filter(|&p| fabric.uses_shm(p) && cards[p].len() > 2).count();
    let acceptor = {
        let (ia, pz, evds) = (ia.clone(), pz.clone(), evds.clone());
        std::thread::spawn(move || -> Result<Vec<(usize, Arc<dyn Ep>)>> {
            let mut got = Vec::new();
            while got.len() < lower {
                if let Event::ConnectionRequest(cr) = pevd.wait(Some(OP_TIMEOUT), 1)? {
                    let from = cr
                        .private_data()
                        .get(..8)
                        .map(|b| u64::from_le_bytes(b.try_into().expect("8")) as usize);
                    match from {
                        Some(from) if from < me => {
                            let ep = ia.create_ep(&pz, &evds)?;
                            cr.accept(&ep, b"dsm")?;
                            got.push((from, ep));
                        }
                        _ => {
                            let _ = cr.reject(b"not a dsm peer");
                        }
                    }
                }
            }
            Ok(got)
        })
    };
    for p in (me + 1..n).filter(|&p| fabric.uses_shm(p) && cards[p].len() > 2) {
        let port = u16::from_le_bytes([cards[p][0], cards[p][1]]);
        let addr = String::from_utf8_lossy(&cards[p][2..]).to_string();
        let ep = ia.create_ep(pz, evds)?;
        ep.connect(&addr, port, &(me as u64).to_le_bytes(), OP_TIMEOUT)?;
        data[p] = Some(ep);
    }
    for (from, ep) in
        acceptor.join().map_err(|_| DsmError::Protocol("shm acceptor panicked".into()))??
    {
        data[from] = Some(ep);
    }
    Ok((data, psp))
}
