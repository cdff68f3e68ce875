//! The bridge: the forwarder a zipper node runs (`rmr-bridge`).
//!
//! It owns one IA into cluster A and one into cluster B (each of any
//! backend) and listens on both. A client's connection names a target on
//! the other side; the bridge connects there and splices the two
//! connections ([`splice`](self)). Forwarding is full duplex: the thread
//! that reads side A (blocking on side A's EVD, so it drives A's sockets
//! itself) forwards to B, the thread that reads B forwards to A, each
//! pinned with hwloc. Small messages go eagerly through pre-registered
//! bounce buffers under credit-based flow control; large transfers are cut
//! through in chunks. With `store_and_forward` it instead behaves like the
//! Leiden Zipper's forwarder — one thread, whole messages, a handshake per
//! message — as a baseline for benchmarks.

mod allow;
mod bind;
mod splice;

use crate::credit::{CreditConfig, Credits};
use crate::handshake::{BridgeHello, ClientHello, Reply};
pub use allow::AllowNet;

/// What a client whose hello is refused hears (whatever it named).
pub const NOT_ADMITTED: &[u8] = b"zipper: not admitted (not a member of this bridge's job)";
use crate::ring::Ring;
use crate::wire::HDR;
use rmr_api::provider::SoftEvd;
use rmr_api::{Access, ConnRequest, Ep, EpEvds, EpId, Error, Evd, Event, Ia, Psp, Pz, Result};
use splice::{CTL_SLOTS, Link, Splice, SpliceSt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How a bridge runs.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    /// Spec of the IA into cluster A (e.g. `tcp:198.18.10.2`).
    pub a: String,
    /// Spec of the IA into cluster B.
    pub b: String,
    /// Service (port) the bridge listens on, on both sides.
    pub port: u16,
    /// Largest chunk (bytes); clients may lower it.
    pub chunk: u64,
    /// Data buffers of each per-connection ring.
    pub ring: u16,
    /// The Leiden Zipper's forwarder instead (benchmark baseline).
    pub store_and_forward: bool,
    /// Pin the forwarding threads with hwloc.
    pub bind: bool,
    /// How long a stop lets in-flight transfers finish.
    pub drain: Duration,
    /// Who may use the bridge: a client's own address and the target its
    /// hello names must both lie in one of these (the job's members: the
    /// world file's processes, or the blocks the bridge was started with).
    /// A bridge with none refuses to start.
    pub allow: Vec<AllowNet>,
    /// Test hook: a pause between the target's accepting a new connection
    /// and the bridge's accepting the client's (widens the window in which
    /// the target may already send toward a client not yet connected).
    #[doc(hidden)]
    pub accept_delay: Duration,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            a: String::new(),
            b: String::new(),
            port: 7700,
            chunk: 64 << 10,
            ring: 16,
            store_and_forward: false,
            bind: true,
            drain: Duration::from_secs(5),
            allow: Vec::new(),
            accept_delay: Duration::ZERO,
        }
    }
}

rmr_api::config_builder!(
    /// Builds a [`BridgeConfig`] from the defaults:
    /// `BridgeConfig::builder().a(a).b(b).allow(members).build()?`.
    BridgeConfigBuilder for BridgeConfig {
        a: String,
        b: String,
        port: u16,
        chunk: u64,
        ring: u16,
        store_and_forward: bool,
        bind: bool,
        drain: Duration,
        allow: Vec<AllowNet>,
    }
);

impl BridgeConfig {
    /// Checks the values: a chunk of 1 KiB to 16 MiB, a ring of 2 to
    /// 1024 buffers, and someone admitted.
    ///
    /// # Errors
    /// [`rmr_api::Error::BadSetting`] naming the value out of range;
    /// [`rmr_api::Error::InvalidArgument`] when `allow` is empty.
    pub fn check(&self) -> Result<()> {
        rmr_api::settings::check_within("chunk", self.chunk, 1024, 16 << 20)?;
        rmr_api::settings::check_within("ring", self.ring.into(), 2, 1024)?;
        if self.allow.is_empty() {
            return Err(Error::invalid(
                "the bridge would admit nobody: give it its job's world file (--world) or the \
                 members' addresses (--allow ADDR[/BITS],...; BridgeConfig::allow)",
            ));
        }
        Ok(())
    }
}

struct Side {
    spec: String,
    ia: Arc<dyn Ia>,
    pz: Arc<dyn Pz>,
    evd: Arc<dyn Evd>,
}

struct Shared {
    cfg: BridgeConfig,
    sides: [Side; 2],
    splices: RwLock<HashMap<u32, Arc<Splice>>>,
    eps: RwLock<HashMap<EpId, (u32, usize)>>,
    next: AtomicU32,
    stop: AtomicBool,
    binding: [Mutex<String>; 2],
}

/// A running bridge.
pub struct Bridge {
    sh: Arc<Shared>,
    psps: Mutex<Vec<Arc<dyn Psp>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

fn ring_cfg(cfg: &BridgeConfig) -> CreditConfig {
    CreditConfig::for_ring(cfg.ring)
}

impl Shared {
    fn splice(&self, id: u32) -> Option<Arc<Splice>> {
        self.splices.read().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
    }

    fn handle(&self, side: usize, ev: Event) {
        crate::trace::line(|| format!("bridge side{side} event {}", crate::trace::ev(&ev)));
        match ev {
            Event::Dto(c) => {
                let (id, kind, slot) = splice::split(c.cookie.0);
                if let Some(sp) = self.splice(id) {
                    let mut st = sp.lock();
                    sp.on_completion(&mut st, side, kind, slot, c.status);
                    sp.pump(&mut st);
                    sp.pass_on_close(&mut st);
                }
            }
            Event::Disconnected { ep } | Event::Broken { ep, .. } => {
                let hit = self.eps.read().unwrap_or_else(|e| e.into_inner()).get(&ep).copied();
                if let Some((id, s)) = hit {
                    self.end_link(id, s);
                }
            }
            _ => {}
        }
    }

    /// Side `s` of splice `id` is gone: close the other side too.
    fn end_link(&self, id: u32, s: usize) {
        let Some(sp) = self.splice(id) else { return };
        crate::trace::line(|| format!("bridge splice {id} side{s} ended"));
        let both = {
            let mut st = sp.lock();
            st.link[s].ended = true;
            // What the other side sent toward this one can no longer land:
            // the pump fails it (its initiator hears).
            sp.pump(&mut st);
            sp.pass_on_close(&mut st);
            st.link[1 - s].ended
        };
        if both {
            self.forget(&sp);
        }
    }

    fn forget(&self, sp: &Arc<Splice>) {
        tracing::info!(target: "rmr::zipper", session = sp.id, "session ended");
        self.splices.write().unwrap_or_else(|e| e.into_inner()).remove(&sp.id);
        let mut eps = self.eps.write().unwrap_or_else(|e| e.into_inner());
        for ep in &sp.eps {
            eps.remove(&ep.id());
        }
    }

    /// The thread that reads side `s` (cut-through mode).
    fn forwarder(self: Arc<Self>, s: usize) {
        let b = bind::bind_side_thread(s, self.cfg.bind);
        *self.binding[s].lock().unwrap_or_else(|e| e.into_inner()) = b;
        let evd = self.sides[s].evd.clone();
        let soft = evd.as_any().downcast_ref::<SoftEvd>();
        while !self.stop.load(Ordering::Acquire) {
            if let Ok(ev) = evd.wait(Some(Duration::from_millis(50)), 1) {
                // Posts hold small frames for batching; nobody is woken to
                // send them: this thread does, right after the batch (the far
                // side's EVD is another thread's, and a hand-off to it would
                // cost a wake-up per message).
                rmr_api::provider::with_deferred_doorbell(|| {
                    self.handle(s, ev);
                    let mut n = 0;
                    while n < 256 {
                        // What the wait's drive already queued (the next wait
                        // reads the sockets again: no read that finds nothing
                        // on every endpoint of the side after each batch).
                        let next = match soft {
                            Some(q) => q.try_pop(),
                            None => evd.dequeue(),
                        };
                        match next {
                            Some(ev) => self.handle(s, ev),
                            None => break,
                        }
                        n += 1;
                    }
                });
                self.flush(1 - s);
                self.flush(s);
            }
        }
    }

    /// Sends what side `x`'s endpoints hold (see `SoftEvd::flush_writes`).
    fn flush(&self, x: usize) {
        if let Some(e) = self.sides[x].evd.as_any().downcast_ref::<SoftEvd>() {
            e.flush_writes();
        }
    }

    /// The store-and-forward baseline: one thread, half duplex.
    fn single(self: Arc<Self>) {
        let b = bind::bind_side_thread(0, self.cfg.bind);
        for m in &self.binding {
            *m.lock().unwrap_or_else(|e| e.into_inner()) = format!("{b} (one thread, both ways)");
        }
        let mut turn = 0;
        while !self.stop.load(Ordering::Acquire) {
            let mut any = false;
            for s in 0..2 {
                while let Some(ev) = self.sides[s].evd.dequeue() {
                    self.handle(s, ev);
                    any = true;
                }
            }
            if !any {
                if let Ok(ev) = self.sides[turn].evd.wait(Some(Duration::from_micros(200)), 1) {
                    self.handle(turn, ev);
                }
                turn ^= 1;
            }
        }
    }

    /// Sets up one splice for a client's request arriving on side `s`.
    fn setup(&self, s: usize, cr: &ConnRequest) -> Result<()> {
        let _span =
            tracing::info_span!(target: "rmr::zipper", "session", side = s, from = %cr.peer())
                .entered();
        let Some(hello) = ClientHello::decode(cr.private_data()) else {
            let _ = cr.reject(b"zipper: not a zipper client");
            return Err(Error::Protocol("not a zipper client".into()));
        };
        // Only between the job's members, checked before anything is
        // opened; the answer is the same whatever the target is (it says
        // nothing of what the bridge can reach).
        let (from, to) = (cr.peer(), hello.target);
        if !allow::admitted(&self.cfg.allow, &from) || !allow::admitted(&self.cfg.allow, to) {
            let _ = cr.reject(NOT_ADMITTED);
            return Err(Error::Protocol(format!(
                "refused {from} -> {to}:{}: not a member of the bridge's job",
                hello.service
            )));
        }
        let o = 1 - s;
        let id = self.next.fetch_add(1, Ordering::AcqRel);
        let chunk = u64::from(hello.chunk).min(self.cfg.chunk).max(1024);
        let mine = ring_cfg(&self.cfg);
        let mk_ep = |x: usize| -> Result<Arc<dyn Ep>> {
            self.sides[x].ia.create_ep(&self.sides[x].pz, &EpEvds::single(&self.sides[x].evd))
        };
        let eps = [mk_ep(0)?, mk_ep(1)?];
        let rings = [
            Ring::new(&[&self.sides[0].pz, &self.sides[1].pz], mine.total(), self.cfg.chunk)?,
            Ring::new(&[&self.sides[1].pz, &self.sides[0].pz], mine.total(), self.cfg.chunk)?,
        ];
        let ctl = |x: usize| -> Result<_> {
            let r = rmr_api::MemRegion::new(CTL_SLOTS * HDR);
            let l = self.sides[x].pz.register_all(&r, Access::empty())?;
            Ok((r, l))
        };
        // The client's ring is known now, the target's once it replies (a
        // placeholder until then: `set_peer` keeps what happens meanwhile).
        let mut credits = [Credits::new(mine, mine), Credits::new(mine, mine)];
        credits[s] = Credits::new(hello.ring, mine);
        let [c0, c1] = credits;
        let sp = Arc::new(Splice {
            id,
            eps,
            rings,
            ctl: [ctl(0)?, ctl(1)?],
            sf: self.cfg.store_and_forward,
            st: Mutex::new(SpliceSt {
                link: [Link::new(c0, mine.total()), Link::new(c1, mine.total())],
            }),
        });
        crate::trace::line(|| {
            format!(
                "splice {id} from side{s} {} target {}:{} eps {} {}",
                cr.peer(),
                hello.target,
                hello.service,
                sp.eps[0].id().0,
                sp.eps[1].id().0
            )
        });
        {
            let mut eps = self.eps.write().unwrap_or_else(|e| e.into_inner());
            eps.insert(sp.eps[0].id(), (id, 0));
            eps.insert(sp.eps[1].id(), (id, 1));
        }
        self.splices.write().unwrap_or_else(|e| e.into_inner()).insert(id, sp.clone());
        let fail = |e: Error| {
            self.forget(&sp);
            e
        };
        sp.post_ring(o).map_err(fail)?;
        let bh =
            BridgeHello { ring: mine, chunk: chunk as u32, from: &cr.peer(), user: hello.user }
                .encode();
        let reply =
            match sp.eps[o].connect(hello.target, hello.service, &bh, Duration::from_secs(10)) {
                Ok(r) => r,
                Err(e) => {
                    let why = match &e {
                        Error::Rejected { private_data } => private_data.clone(),
                        e => {
                            format!("zipper: cannot reach {}:{}: {e}", hello.target, hello.service)
                                .into_bytes()
                        }
                    };
                    let _ = cr.reject(&why);
                    return Err(fail(e));
                }
            };
        let Some(r) = Reply::decode(&reply) else {
            let _ = sp.eps[o].disconnect();
            let _ = cr.reject(b"zipper: the target is not a zipper endpoint");
            return Err(fail(Error::Protocol("target reply".into())));
        };
        let chunk = u64::from(r.chunk).min(chunk);
        {
            // The target may already have sent (it may send the moment it has
            // accepted): its messages wait in the splice until the client's
            // side is up, below.
            let mut st = sp.lock();
            st.link[o].credits.set_peer(r.ring);
            st.link[o].up = true;
            sp.pump(&mut st);
        }
        sp.post_ring(s).map_err(fail)?;
        if !self.cfg.accept_delay.is_zero() {
            std::thread::sleep(self.cfg.accept_delay);
        }
        let back = Reply { ring: mine, chunk: chunk as u32, user: r.user }.encode();
        if let Err(e) = cr.accept(&sp.eps[s], &back) {
            let _ = sp.eps[o].disconnect();
            return Err(fail(e));
        }
        let mut st = sp.lock();
        st.link[s].up = true;
        // Forward what the target sent while the client was being accepted.
        sp.pump(&mut st);
        sp.pass_on_close(&mut st);
        drop(st);
        self.flush(s);
        tracing::info!(
            target: "rmr::zipper",
            session = sp.id,
            target_addr = %hello.target,
            service = hello.service,
            "session set up"
        );
        Ok(())
    }
}

impl Bridge {
    /// Opens both IAs, listens on both sides and starts forwarding.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bridge that would admit nobody (no
    /// [`BridgeConfig::allow`]); opening an IA, listening or spawning a
    /// thread failed.
    pub fn start(cfg: BridgeConfig) -> Result<Bridge> {
        cfg.check()?;
        crate::register();
        let side = |spec: &str| -> Result<Side> {
            let ia = rmr_api::open(spec)?;
            Ok(Side { spec: spec.into(), pz: ia.create_pz()?, evd: ia.create_evd()?, ia })
        };
        let sh = Arc::new(Shared {
            sides: [side(&cfg.a)?, side(&cfg.b)?],
            cfg,
            splices: RwLock::default(),
            eps: RwLock::default(),
            next: AtomicU32::new(1),
            stop: AtomicBool::new(false),
            binding: [Mutex::new("starting".into()), Mutex::new("starting".into())],
        });
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f).map_err(|e| Error::io("spawn", e))
        };
        if sh.cfg.store_and_forward {
            let s = sh.clone();
            threads.push(spawn("rmr-bridge-sf".into(), Box::new(move || s.single()))?);
        } else {
            for x in 0..2 {
                let s = sh.clone();
                let name = if x == 0 { "rmr-bridge-a2b" } else { "rmr-bridge-b2a" };
                threads.push(spawn(name.into(), Box::new(move || s.forwarder(x)))?);
            }
        }
        let mut psps: Vec<Arc<dyn Psp>> = Vec::new();
        for x in 0..2 {
            let evd = sh.sides[x].ia.create_evd()?;
            let psp = sh.sides[x].ia.create_psp(sh.cfg.port, &evd).map_err(|e| {
                Error::io(
                    format!("listen on {}:{}", sh.sides[x].spec, sh.cfg.port),
                    std::io::Error::other(e.to_string()),
                )
            })?;
            psps.push(psp);
            let s = sh.clone();
            threads.push(spawn(
                format!("rmr-bridge-cm{x}"),
                Box::new(move || {
                    while !s.stop.load(Ordering::Acquire) {
                        if let Ok(Event::ConnectionRequest(cr)) =
                            evd.wait(Some(Duration::from_millis(100)), 1)
                        {
                            let s = s.clone();
                            // Connecting to the target may take a while: not on this thread.
                            let _ = std::thread::Builder::new()
                                .name("rmr-bridge-setup".into())
                                .spawn(move || {
                                    if let Err(e) = s.setup(x, &cr) {
                                        tracing::warn!(target: "rmr::zipper", side = x, error = %e, "connection refused");
                                    }
                                });
                        }
                    }
                }),
            )?);
        }
        // Wait until the forwarding threads report their binding.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2)
            && sh.binding.iter().any(|b| *b.lock().unwrap_or_else(|e| e.into_inner()) == "starting")
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(Bridge { sh, psps: Mutex::new(psps), threads: Mutex::new(threads) })
    }

    /// One status line: sides, mode, thread bindings, connections, traffic.
    pub fn status(&self) -> String {
        let sh = &self.sh;
        let b = |i: usize| sh.binding[i].lock().unwrap_or_else(|e| e.into_inner()).clone();
        let splices: Vec<Arc<Splice>> =
            sh.splices.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        let (mut m, mut by) = ([0u64; 2], [0u64; 2]);
        for sp in &splices {
            let st = sp.lock();
            for x in 0..2 {
                m[x] += st.link[x].msgs;
                by[x] += st.link[x].bytes;
            }
        }
        format!(
            "rmr-bridge: A={} B={} port={} mode={} chunk={} ring={} | a->b thread: {} | b->a thread: {} | connections={} | a->b {} msgs {} B, b->a {} msgs {} B",
            sh.sides[0].spec,
            sh.sides[1].spec,
            sh.cfg.port,
            if sh.cfg.store_and_forward { "store-and-forward" } else { "cut-through" },
            sh.cfg.chunk,
            sh.cfg.ring,
            b(0),
            b(1),
            splices.len(),
            m[0],
            by[0],
            m[1],
            by[1]
        )
    }

    /// Per-connection flow-control state, one line each (diagnostics).
    pub fn details(&self) -> Vec<String> {
        let splices: Vec<Arc<Splice>> =
            self.sh.splices.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        splices
            .iter()
            .map(|sp| {
                let st = sp.lock();
                let l = |x: usize| {
                    let k = &st.link[x];
                    format!(
                        "data={} ctl={} owed={:?} ops={} fwd={} outq={} out={} ended={} sf={:?}",
                        k.credits.data(),
                        k.credits.ctl(),
                        k.credits.owed(),
                        k.tracker.in_flight(),
                        k.fwd.len(),
                        k.outq.len(),
                        k.out,
                        k.ended,
                        k.sf
                    )
                };
                format!("splice {}: A[{}] B[{}]", sp.id, l(0), l(1))
            })
            .collect()
    }

    /// Number of live bridged connections.
    pub fn connections(&self) -> usize {
        self.sh.splices.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Stops cleanly: no new connections; in-flight transfers get up to
    /// the configured drain time to finish (their initiators then see them
    /// complete); whatever is still in flight after that fails with an
    /// error event at its initiator when the connections close. Returns
    /// the number of connections that were still busy at the deadline.
    pub fn stop(&self) -> usize {
        for p in self.psps.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            p.close();
        }
        let t0 = Instant::now();
        let busy = loop {
            let splices: Vec<Arc<Splice>> = self
                .sh
                .splices
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .cloned()
                .collect();
            let busy = splices.iter().filter(|sp| !Splice::idle(&sp.lock())).count();
            if busy == 0 || t0.elapsed() >= self.sh.cfg.drain {
                break busy;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // Let the last acknowledgements go out before closing.
        std::thread::sleep(Duration::from_millis(20));
        let splices: Vec<Arc<Splice>> =
            self.sh.splices.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        for sp in splices {
            for ep in &sp.eps {
                let _ = ep.disconnect();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        self.sh.stop.store(true, Ordering::Release);
        for t in self.threads.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = t.join();
        }
        busy
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        if !self.sh.stop.load(Ordering::Acquire) {
            self.stop();
        }
    }
}
