//! Progress: harvesting the rails' EVDs, by a waiting application thread
//! (through the multirail EVD) or by a poster that waits for room.

use crate::ep::state::*;
use crate::evd::{MrEvd, Polled};
use rmr_api::provider::SoftEvd;
use rmr_api::{Evd, Event};
use smallvec::SmallVec;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Core {
    /// Sends the frames the rails hold for batching (or queue behind a full
    /// socket) now, without reading or blocking: [`SoftEvd::flush_writes`]
    /// over this EP's rails, with no driver lookup. Returns whether any went.
    pub(crate) fn flush_rails(&self) -> bool {
        let mut moved = false;
        for r in &self.rails {
            for d in r.drivers().iter() {
                moved |= d.flush();
            }
        }
        moved
    }

    pub(crate) fn rail_evds(&self) -> impl Iterator<Item = &Arc<dyn Evd>> {
        self.rails.iter().map(|r| &r.evd)
    }

    /// Drains the rail EVDs once (the inline/fork-join progress; a shortcut
    /// past the rail threads for a waiter).
    pub(crate) fn poll_rails(&self) -> bool {
        self.poll_rails_taking(None).0
    }

    /// [`Core::poll_rails`] for a waiter on the EVD whose queue is `take`:
    /// also returns the event handed back to it (see [`Core::deliver_taking`]).
    pub(crate) fn poll_rails_taking(&self, take: Option<&SoftEvd>) -> (bool, Option<Event>) {
        // Every rail EVD a software one: nothing to do unless one holds events
        // (a look at counters, no lock).
        if self.soft_rails && !self.has_failed() && self.rails.iter().all(|r| r.evd.is_empty()) {
            return (false, None);
        }
        // Wait for a harvesting rail thread rather than skip: it handles only its
        // own rail, and events of the others must not be left behind.
        let _g = self.harvest.lock().unwrap_or_else(|e| e.into_inner());
        let mut batch = Batch::new();
        for i in 0..self.rails.len() {
            self.drain_rail(i, &mut batch);
        }
        if batch.is_empty() && !self.has_failed() {
            return (false, None);
        }
        (true, self.handle_taking(&mut batch, take))
    }

    /// Waits (at most `max`) until a rail has an event to harvest, driving
    /// the rails' sockets meanwhile: how a post blocked by a fence or a full
    /// window waits without rail threads. Spinning first, as a waiter on the
    /// EVD would, then blocking in `poll` on every rail at once; without the
    /// EVD's help (not a multirail EVD), a yield.
    pub(super) fn await_rails(&self, max: Duration) {
        let ready = || self.rails.iter().any(|r| !r.evd.is_empty()) || self.has_failed();
        match self.user.request.as_any().downcast_ref::<MrEvd>() {
            Some(m) => {
                m.q.drive_until_spin(Some(max), m.q.spin_time(), &ready);
            }
            None => std::thread::yield_now(),
        }
    }

    pub(super) fn drain_rail(&self, i: usize, batch: &mut Batch) {
        let r = &self.rails[i];
        // A software rail EVD is driven by the waiter's poll (drive_through);
        // here its events are only collected. Others make progress in dequeue.
        let soft = r.evd.as_any().downcast_ref::<SoftEvd>();
        let next = || match soft {
            Some(s) => s.try_pop(),
            None => r.evd.dequeue(),
        };
        while let Some(ev) = next() {
            batch.push((i, ev));
        }
    }

    /// Whether an application thread is waiting on one of this EP's EVDs
    /// (it harvests the rails itself).
    pub(super) fn waited(&self) -> bool {
        [&self.user.request, &self.user.recv, &self.user.conn]
            .iter()
            .any(|e| e.as_any().downcast_ref::<MrEvd>().is_some_and(MrEvd::waiting))
    }

    pub(super) fn has_failed(&self) -> bool {
        self.has_failed.load(Ordering::Acquire)
    }
}

impl Polled for Core {
    fn rail_evds(&self) -> SmallVec<[Arc<dyn Evd>; 4]> {
        Core::rail_evds(self).cloned().collect()
    }

    fn flush_rails(&self) -> bool {
        Core::flush_rails(self)
    }

    fn poll_rails_taking(&self, take: Option<&SoftEvd>) -> (bool, Option<Event>) {
        Core::poll_rails_taking(self, take)
    }

    fn watch(&self, hook: Arc<dyn Fn() + Send + Sync>) {
        for r in &self.rails {
            if let Some(s) = r.evd.as_any().downcast_ref::<SoftEvd>() {
                let h = hook.clone();
                s.on_publish(Box::new(move || h()));
            }
        }
        self.watchers.lock().unwrap_or_else(|e| e.into_inner()).push(hook);
    }
}
