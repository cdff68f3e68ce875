//! The IA's connection-event thread: waits for the IA's event queue
//! (`fi_eq_sread`, or its fd and a gated read on the `sockets` provider:
//! see `Eq::open`) and hands each event to the passive endpoint or
//! endpoint it names.

use crate::ffi::{Eq, EqEvent};
use crate::ia::IaShared;
use rmr_api::{Error, Result};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long the thread waits for an event before it looks whether the IA
/// is still there.
const SLICE: Duration = Duration::from_millis(100);

/// Starts the EQ thread; it ends within one slice after the IA is gone.
pub(crate) fn spawn(ia: Weak<IaShared>, eq: Arc<Eq>) -> Result<()> {
    std::thread::Builder::new()
        .name("rmr-ofi-eq".into())
        .stack_size(256 << 10)
        .spawn(move || {
            let mut reader = EqReader::default();
            loop {
                let ev = reader.next(&eq, SLICE);
                let Some(ia) = ia.upgrade() else { break };
                match ev {
                    Ok(EqEvent::None) => {}
                    Ok(e) => dispatch(&ia, e),
                    Err(e) => {
                        tracing::debug!(target: "rmr::ofi", error = %e, "EQ read failed");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        })
        .map(|_| ())
        .map_err(|e| Error::io("spawn the EQ thread", e))
}

fn dispatch(ia: &Arc<IaShared>, e: EqEvent) {
    match e {
        EqEvent::ConnReq { pep, info, data } => match ia.psp_by_fid(pep) {
            Some(psp) => psp.on_connreq(info, data),
            None => drop(info),
        },
        EqEvent::Connected { ep, data } => {
            tracing::debug!(target: "rmr::ofi", ep = ep, bytes = data.len(), "FI_CONNECTED");
            if let Some(ep) = ia.ep_by_fid(ep) {
                ep.on_connected(data);
            }
        }
        EqEvent::Shutdown { ep } => {
            tracing::debug!(target: "rmr::ofi", ep = ep, "FI_SHUTDOWN");
            if let Some(ep) = ia.ep_by_fid(ep) {
                ep.on_shutdown();
            }
        }
        EqEvent::Error { fid, err, data } => {
            tracing::debug!(target: "rmr::ofi", fid = fid, error = %err, bytes = data.len(), "EQ error");
            if let Some(ep) = ia.ep_by_fid(fid) {
                ep.on_cm_error(err, data);
            }
        }
        EqEvent::None => {}
    }
}

/// What the thread reading an event queue remembers between reads.
#[derive(Default)]
struct EqReader {
    /// The last read returned an event: read again before waiting.
    again: bool,
    /// Reads in a row that the fd called ready and that found nothing.
    idle: u32,
}

impl EqReader {
    /// The next event of `eq`, waiting up to `timeout` for one. A gated
    /// queue (see `Eq::open`) is waited on through its fd, then read
    /// without blocking under the gate; the gate is let go before the
    /// event is returned, so handling it may close endpoints.
    fn next(&mut self, eq: &Eq, timeout: Duration) -> Result<EqEvent> {
        let Some(fd) = eq.gated_fd() else {
            return eq.sread(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX));
        };
        let polled = !self.again;
        // The fd said ready (or could not be polled): an empty read then
        // counts as idle.
        let mut ready = false;
        if polled {
            let mut wait = timeout;
            if self.idle > 0 {
                // The fd said ready and there was nothing to read: it stays
                // so until the next event is read (a close took out a
                // queued error after the error had set the fd). Nap, longer
                // each time, rather than spin; the nap is part of the wait.
                let nap = Duration::from_millis(1 << self.idle.min(7)).min(timeout);
                std::thread::sleep(nap);
                wait = timeout - nap;
            }
            // Quiet for the whole wait: still read once. A close that
            // empties the plain list quiets the fd even while another
            // endpoint's error waits, so no error waits longer than a
            // slice for the next event to wake the thread.
            ready = match rmr_api::provider::io::poll_readable(fd, wait) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(target: "rmr::ofi", error = %e, "poll on the event queue's fd failed");
                    true
                }
            };
        }
        let ev = eq.read_gated();
        // After an event, read again before sleeping: reading an error
        // quiets the fd when no plain event is queued, even with more
        // errors behind it.
        self.again = matches!(ev, Ok(ref e) if !matches!(e, EqEvent::None));
        self.idle = if !self.again && ready { self.idle.saturating_add(1) } else { 0 };
        ev
    }
}
