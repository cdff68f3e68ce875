//! The engines: connecting a core's rails and, under `pinned`, the rail
//! threads (one per rail of the endpoint, bound near its NIC) that post
//! their rail's work and harvest its completions when nobody waits.

use crate::config::Engine;
use crate::ep::state::*;
use crate::evd::{MrEvd, Polled};
use rmr_api::provider::SoftEvd;
use rmr_api::{EpState, Error, Evd, Event, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Core {
    /// A pinned rail thread: posts its rail's work and pushes it out as the
    /// rail drains; harvests the rail's completions when no application
    /// thread is waiting to do it (it is never woken by completions, so a
    /// waiter and the rail threads do not race for every event).
    pub(super) fn rail_thread(self: Arc<Self>, rail: usize, rx: crossbeam_channel::Receiver<Work>) {
        let cpu = crate::bind::bind_thread_to_core(rail, self.cfg.bind);
        *self.rails[rail].cpu.lock().unwrap_or_else(|e| e.into_inner()) = cpu;
        let mut batch = Batch::new();
        let evd = self.rails[rail].evd.clone();
        let soft = evd.as_any().downcast_ref::<SoftEvd>();
        const NAP_MIN: Duration = Duration::from_millis(1);
        let mut nap = NAP_MIN;
        loop {
            let seen = soft.map_or(0, |s| s.poke_gen());
            while let Ok(w) = rx.try_recv() {
                if let Err(e) = self.post_work(&w) {
                    self.fail(&w, &e);
                }
                self.rails[rail].pending.fetch_sub(1, Ordering::AcqRel);
                nap = NAP_MIN;
            }
            match soft {
                Some(s) => {
                    if !rx.is_empty() {
                        continue;
                    }
                    if (!s.is_empty() || self.has_failed()) && !self.waited() {
                        if let Ok(_g) = self.harvest.try_lock() {
                            while !s.is_empty() {
                                match evd.dequeue() {
                                    Some(Event::Software(WAKE)) => {}
                                    Some(ev) => batch.push((rail, ev)),
                                    None => break,
                                }
                            }
                            self.handle(&mut batch);
                            nap = NAP_MIN;
                            continue;
                        }
                    }
                }
                // Only this thread consumes such a rail's EVD.
                None => {
                    match evd.wait(Some(Duration::from_millis(200)), 1) {
                        Ok(Event::Software(WAKE)) | Err(_) => {}
                        Ok(ev) => batch.push((rail, ev)),
                    }
                    while let Some(ev) = evd.dequeue() {
                        if !matches!(ev, Event::Software(WAKE)) {
                            batch.push((rail, ev));
                        }
                    }
                    if !batch.is_empty() || self.has_failed() {
                        let _g = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
                        self.handle(&mut batch);
                    }
                }
            }
            if self.stop.load(Ordering::Acquire) && rx.is_empty() {
                let st = self.lock();
                if st.ended.iter().all(|e| *e) || st.conn != EpState::Connected {
                    break;
                }
            }
            if let Some(s) = soft {
                s.wait_poke_flushing(seen, nap);
                nap = (nap * 2).min(Duration::from_millis(10));
            }
        }
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
                let _ = r.drivers.set(s.own_driver_handles());
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
        match self.cfg.engine {
            Engine::Pinned => {
                for r in 0..self.rails.len() {
                    let (tx, rx) = crossbeam_channel::unbounded();
                    *self.rails[r].tx.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
                    let me = self.clone();
                    std::thread::Builder::new()
                        .name(format!("rmr-mr-rail{r}"))
                        .spawn(move || me.rail_thread(r, rx))
                        .map_err(|e| Error::io("spawn rail thread", e))?;
                }
            }
            Engine::Inline | Engine::ForkJoin => {}
        }
        // Waiters harvest rail EVDs themselves (with rail threads as well: a
        // waiter that finds its completion needs no hand-off).
        let polled: Arc<dyn Polled> = self.clone();
        for e in [&self.user.request, &self.user.recv, &self.user.conn] {
            if let Some(m) = e.as_any().downcast_ref::<MrEvd>() {
                m.attach_polled(&polled);
            }
        }
        self.lock().conn = EpState::Connected;
        self.deliver(smallvec::smallvec![(
            TO_CONN,
            Event::Established { ep: self.id, private_data: peer_pd }
        )]);
        Ok(())
    }
}
