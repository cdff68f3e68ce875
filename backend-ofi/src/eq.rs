//! The IA's connection-event thread: waits for the IA's event queue
//! (`fi_eq_sread`, or its fd and a gated read on the `sockets` provider:
//! see `Eq::open`) and hands each event to the passive endpoint or
//! endpoint it names.

use crate::ffi::{Eq, EqEvent, EqReader};
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
                let ev = eq.next(SLICE, &mut reader);
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
