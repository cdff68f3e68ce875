//! The engines: connecting a core's rails and, under `pinned`, the rail
//! threads (one per rail of the IA, shared by all its endpoints, bound
//! near its NIC) that post their rail's work and harvest its completions
//! when nobody waits.

use crate::ep::state::*;
use crate::evd::{MrEvd, Polled};
use crate::objects::MrIa;
use rmr_api::provider::SoftEvd;
use rmr_api::{EpState, Error, Evd, Event, Result};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec, eventfd, poll};
use std::any::Any;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a rail thread naps between looks at its endpoints' rail
/// queues while nothing happens, at first and at most.
const NAP_MIN: Duration = Duration::from_millis(1);
const NAP_MAX: Duration = Duration::from_millis(10);

/// The `pinned` engine's thread for one rail of an IA, shared by all the
/// IA's endpoints (one thread per rail of the node, not per connection):
/// it posts the work they hand it, pushes out their rail's queued frames
/// as the rail drains, and harvests their rail completions when no
/// application thread is waiting to do it (it is never woken by
/// completions, so a waiter and the rail thread do not race for every
/// event). Ends once the last endpoint using it is gone.
pub(crate) struct RailLine {
    tx: crossbeam_channel::Sender<(Arc<Core>, Work)>,
    sh: Arc<LineShared>,
}

/// What the rail thread and its senders share.
struct LineShared {
    rail: usize,
    /// Rung when work is sent while the thread sleeps.
    bell: Option<OwnedFd>,
    sleeping: AtomicBool,
    /// The endpoints using this rail (held weakly: an endpoint's handle
    /// owns it).
    cores: Mutex<Vec<Weak<Core>>>,
    cpu: Mutex<String>,
}

impl RailLine {
    /// The IA's thread for rail `r`, started if it is not running.
    pub(super) fn of(ia: &MrIa, r: usize) -> Result<Arc<RailLine>> {
        let mut lines = ia.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() < ia.rails.len() {
            let none: Weak<dyn Any + Send + Sync> = Weak::<RailLine>::new();
            lines.resize(ia.rails.len(), none);
        }
        if let Some(l) = lines[r].upgrade().and_then(|a| a.downcast::<RailLine>().ok()) {
            return Ok(l);
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let bell = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).ok();
        let sh = Arc::new(LineShared {
            rail: r,
            bell,
            sleeping: AtomicBool::new(false),
            cores: Mutex::default(),
            cpu: Mutex::new("not started".into()),
        });
        let (s2, bind) = (sh.clone(), ia.cfg.bind);
        std::thread::Builder::new()
            .name(format!("rmr-mr-rail{r}"))
            .spawn(move || s2.run(rx, bind))
            .map_err(|e| Error::io("spawn rail thread", e))?;
        let line = Arc::new(RailLine { tx, sh });
        let any: Arc<dyn Any + Send + Sync> = line.clone();
        lines[r] = Arc::downgrade(&any);
        Ok(line)
    }

    /// `core` uses this rail.
    pub(super) fn join(&self, core: &Arc<Core>) {
        self.sh.lock_cores().push(Arc::downgrade(core));
    }

    /// Hands `w` of `core` to the thread.
    pub(super) fn send(&self, core: Arc<Core>, w: Work) {
        if let Err(e) = self.tx.send((core, w)) {
            let (core, w) = e.into_inner();
            core.rails[w.rail].pending.fetch_sub(1, Ordering::AcqRel);
            core.fail(&w, &Error::NotConnected);
            return;
        }
        if self.sh.sleeping.load(Ordering::SeqCst) {
            if let Some(b) = &self.sh.bell {
                let _ = rustix::io::write(b, &1u64.to_ne_bytes());
            }
        }
    }

    /// Where the thread runs (`attr().notes`).
    pub(super) fn cpu(&self) -> String {
        self.sh.cpu.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl LineShared {
    fn lock_cores(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Core>>> {
        self.cores.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rail thread.
    fn run(&self, rx: crossbeam_channel::Receiver<(Arc<Core>, Work)>, bind: bool) {
        let r = self.rail;
        *self.cpu.lock().unwrap_or_else(|e| e.into_inner()) =
            crate::bind::bind_thread_to_core(r, bind);
        // Endpoints whose rail has frames this thread posted still queued.
        let mut active: Vec<Arc<Core>> = Vec::new();
        let mut nap = NAP_MIN;
        let mut look_at = Instant::now() + nap;
        // The drivers polled while asleep, taken out of their lock (a rail
        // connected again swaps them); reused from nap to nap.
        let mut held: Vec<Arc<dyn rmr_api::provider::Driver>> = Vec::new();
        loop {
            let mut got = false;
            loop {
                match rx.try_recv() {
                    Ok((c, w)) => {
                        if let Err(e) = c.post_work(&w) {
                            c.fail(&w, &e);
                        }
                        let was = c.rails[r].pending.fetch_sub(1, Ordering::SeqCst);
                        // The last work a lost control rail owed: the
                        // handover may go on now. (SeqCst with the flag's
                        // store and the step's load of `pending`: one of
                        // the two sides sees the other.)
                        if was == 1 && c.handing_over.load(Ordering::SeqCst) {
                            c.step_handover();
                        }
                        if !active.iter().any(|a| Arc::ptr_eq(a, &c)) {
                            active.push(c);
                        }
                        got = true;
                    }
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return,
                }
            }
            if got {
                nap = NAP_MIN;
            }
            // Push out what the rail's sockets did not take at once.
            let mut moved = false;
            active.retain(|c| {
                let mut writing = false;
                for d in c.rails[r].drivers().iter() {
                    if d.wait_on().fd.is_some_and(|(_, i)| i.write) {
                        moved |= d.drive();
                        writing = true;
                    }
                }
                writing
            });
            if moved {
                continue;
            }
            let now = Instant::now();
            if now >= look_at {
                let before = self.harvest_all();
                nap = if before { NAP_MIN } else { (nap * 2).min(NAP_MAX) };
                look_at = now + nap;
            }
            // Sleep until work comes, a queued frame can go, or the next look.
            self.sleeping.store(true, Ordering::SeqCst);
            if !rx.is_empty() {
                self.sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            {
                held.clear();
                held.extend(active.iter().flat_map(|c| c.rails[r].drivers().clone()));
                let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(active.len() + 1);
                if let Some(b) = &self.bell {
                    fds.push(PollFd::new(b, PollFlags::IN));
                }
                for d in &held {
                    if let Some((fd, _)) = d.wait_on().fd.filter(|(_, i)| i.write) {
                        fds.push(PollFd::from_borrowed_fd(fd, PollFlags::OUT));
                    }
                }
                let left = look_at.saturating_duration_since(Instant::now());
                // Without an eventfd (out of descriptors), short naps.
                let left = if self.bell.is_none() { left.min(NAP_MIN) } else { left };
                let ts =
                    Timespec { tv_sec: left.as_secs() as _, tv_nsec: left.subsec_nanos() as _ };
                let _ = poll(&mut fds, Some(&ts));
            }
            self.sleeping.store(false, Ordering::SeqCst);
            if let Some(b) = &self.bell {
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(b, &mut buf);
            }
        }
    }

    /// Harvests the rail completions of the endpoints nobody waits on, and
    /// forgets the endpoints that ended. Returns whether any had some.
    fn harvest_all(&self) -> bool {
        let r = self.rail;
        let cores: Vec<Arc<Core>> = {
            let mut cs = self.lock_cores();
            cs.retain(|w| w.upgrade().is_some_and(|c| !c.finished()));
            cs.iter().filter_map(Weak::upgrade).collect()
        };
        let mut any = false;
        let mut batch = Batch::new();
        for c in cores {
            let evd = &c.rails[r].evd;
            // A waiter harvests what can wake it; an EVD that cannot (a
            // bridge's, libfabric's) its waiters only poll: taken here too.
            let (queued, soft) = match evd.as_any().downcast_ref::<SoftEvd>() {
                Some(s) => (!s.is_empty(), true),
                None => (!evd.is_empty(), false),
            };
            if !(queued || c.has_failed()) || (soft && c.waited()) {
                continue;
            }
            let Ok(_g) = c.harvest.try_lock() else { continue };
            while let Some(ev) = evd.dequeue() {
                batch.push((r, ev));
            }
            any |= !batch.is_empty();
            c.handle(&mut batch);
        }
        any
    }
}

impl Core {
    /// Its handle dropped and its connection over: a rail thread forgets it.
    fn finished(&self) -> bool {
        if !self.stop.load(Ordering::Acquire) {
            return false;
        }
        let st = self.lock();
        st.ended.iter().all(|e| *e) || st.conn != EpState::Connected
    }

    /// Makes the logical connection live.
    pub(super) fn start(self: &Arc<Self>, peer_pd: Vec<u8>) -> Result<()> {
        // A receive that completes on a rail becomes the user's event at once,
        // in the thread that drove it, unless the rail holds events its order
        // against matters for (a receive, an error, a connection event): the
        // successful request completions queued there (a signalled write's,
        // as in a write+notify ping-pong) are harvested later.
        for r in &self.rails {
            if let Some(s) = r.evd.as_any().downcast_ref::<SoftEvd>() {
                *r.drivers.write().unwrap_or_else(|e| e.into_inner()) = s.own_driver_handles();
                let me = Arc::downgrade(self);
                s.set_sink(Box::new(move |ev, ahead| {
                    if !matches!(&ev, Event::Dto(c) if c.cookie.0 & RECV_BIT != 0) {
                        return Some(ev);
                    }
                    let overtakes = |e: &Event| {
                        matches!(e, Event::Dto(c) if c.cookie.0 & RECV_BIT == 0 && c.status.is_ok())
                    };
                    // (A long queue means a harvest is due anyway: not scanned.)
                    if ahead.len() > SINK_SCAN || !ahead.iter().all(overtakes) {
                        return Some(ev);
                    }
                    match me.upgrade() {
                        Some(c) => c.sink(ev),
                        None => Some(ev),
                    }
                }));
            }
        }
        // Waiters harvest rail EVDs themselves (with rail threads as well: a
        // waiter that finds its completion needs no hand-off).
        let polled: Arc<dyn Polled> = self.clone();
        for e in [&self.user.request, &self.user.recv, &self.user.conn] {
            if let Some(m) = e.as_any().downcast_ref::<MrEvd>() {
                m.attach_polled(&polled);
            }
        }
        {
            let mut st = self.lock();
            st.conn = EpState::Connected;
            // The handover's receives, on every rail but the control rail.
            let ctl = st.planner.control_rail();
            for r in (0..self.rails.len()).filter(|&r| Some(r) != ctl) {
                self.post_notice_recv(r);
            }
        }
        self.deliver(smallvec::smallvec![(
            TO_CONN,
            Event::Established { ep: self.id, private_data: peer_pd }
        )]);
        Ok(())
    }
}
