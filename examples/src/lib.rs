//! Helpers shared by the examples (kept tiny: the examples are what users copy).

pub mod dsm;
pub mod soak;

use rmr_api::{Ep, EpEvds, Evd, Event, Ia, Pz, Result};
use std::sync::Arc;
use std::time::Duration;

/// Registers every backend compiled into the examples.
pub fn register_backends() {
    backend_tcp::register();
}

/// Waits for one connection request on `psp_evd` and accepts it onto a new
/// EP, returning the EP and the connector's private data.
///
/// # Errors
/// Whatever the wait or the accept returns.
pub fn accept(
    ia: &Arc<dyn Ia>,
    pz: &Arc<dyn Pz>,
    psp_evd: &Arc<dyn Evd>,
    evd: &Arc<dyn Evd>,
    reply: &[u8],
) -> Result<(Arc<dyn Ep>, Vec<u8>)> {
    loop {
        if let Event::ConnectionRequest(cr) = psp_evd.wait(Some(Duration::from_secs(120)), 1)? {
            let ep = ia.create_ep(pz, &EpEvds::single(evd))?;
            let pd = cr.private_data().to_vec();
            cr.accept(&ep, reply)?;
            return Ok((ep, pd));
        }
    }
}

/// Waits for the next DTO completion (skipping connection events) and
/// turns an error status into an error.
///
/// # Errors
/// Timeout, or the completion's own error.
pub fn wait_dto(evd: &Arc<dyn Evd>) -> Result<rmr_api::DtoCompletion> {
    loop {
        if let Event::Dto(c) = evd.wait(Some(Duration::from_secs(60)), 1)? {
            c.result()?;
            return Ok(c);
        }
    }
}

/// Parses `host:port`.
pub fn split_addr(s: &str) -> (String, u16) {
    match s.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().expect("port number")),
        None => (s.to_string(), 4791),
    }
}
