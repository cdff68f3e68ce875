//! The interface adapter: [`Ia`], one opened provider (a NIC, a socket
//! rail, a set of rails), the factory of every other object; [`EpEvds`],
//! the EVDs an endpoint reports to; and [`Listener`], a service point
//! with its EVD.
//!
//! Children keep their parents alive (an LMR holds its PZ, an EP its PZ
//! and EVDs).

use crate::ep::{Ep, Psp};
use crate::error::Result;
use crate::evd::Evd;
use crate::event::{ConnRequest, Event};
use crate::lmr::Pz;
use crate::types::IaAttr;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// The three EVDs an endpoint reports to (they may all be the same EVD).
#[derive(Clone)]
pub struct EpEvds {
    /// Completions of sends, RDMA writes/reads and atomics.
    pub request: Arc<dyn Evd>,
    /// Completions of receives.
    pub recv: Arc<dyn Evd>,
    /// Connection events: established, rejected, disconnected, broken.
    pub conn: Arc<dyn Evd>,
}

impl EpEvds {
    /// One EVD for everything.
    pub fn single(evd: &Arc<dyn Evd>) -> Self {
        EpEvds { request: evd.clone(), recv: evd.clone(), conn: evd.clone() }
    }
}

/// An interface adapter: one rail (one device/port, or one local address).
pub trait Ia: Send + Sync {
    /// Attributes and capabilities.
    fn attr(&self) -> &IaAttr;
    /// Creates a protection zone.
    ///
    /// # Errors
    /// Provider-specific resource errors.
    fn create_pz(&self) -> Result<Arc<dyn Pz>>;
    /// Creates an event dispatcher usable by this IA's endpoints and PSPs.
    ///
    /// # Errors
    /// Provider-specific resource errors.
    fn create_evd(&self) -> Result<Arc<dyn Evd>>;
    /// Creates an unconnected endpoint in `pz` reporting to `evds`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `pz` or an EVD belongs to another provider.
    fn create_ep(&self, pz: &Arc<dyn Pz>, evds: &EpEvds) -> Result<Arc<dyn Ep>>;
    /// Listens on `service` (0 picks a free one; see [`Psp::service`]);
    /// connection requests arrive on `evd` as [`Event::ConnectionRequest`].
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) when the service is taken or the address cannot be bound.
    fn create_psp(&self, service: u16, evd: &Arc<dyn Evd>) -> Result<Arc<dyn Psp>>;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

impl dyn Ia {
    /// Listens on `service` (0 picks a free one) with an EVD of its own for
    /// the connection requests: the simple way to accept connections, see
    /// [`Listener::accept`].
    ///
    /// # Errors
    /// As [`Ia::create_evd`] and [`Ia::create_psp`].
    pub fn listen(&self, service: u16) -> Result<Listener> {
        let evd = self.create_evd()?;
        let psp = self.create_psp(service, &evd)?;
        Ok(Listener { psp, evd })
    }
}

/// A PSP with an EVD of its own, made by [`Ia::listen`](trait.Ia.html#method.listen):
/// connection requests wait there until [`Listener::accept`] takes them.
pub struct Listener {
    psp: Arc<dyn Psp>,
    evd: Arc<dyn Evd>,
}

impl Listener {
    /// Waits up to `timeout` for the next connection request, accepts it
    /// onto `ep` (an unconnected EP of the same IA) sending `reply` as the
    /// private data, and returns the connector's private data. The EP is
    /// connected when this returns (its [`Event::Established`] also
    /// arrives on its connection EVD).
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when no request came in time (`ep` stays
    /// unconnected and usable); the accept's own errors otherwise.
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ia: std::sync::Arc<dyn rmr_api::Ia>) -> rmr_api::Result<()> {
    /// use rmr_api::EpEvds;
    /// use std::time::Duration;
    /// let (pz, evd) = (ia.create_pz()?, ia.create_evd()?);
    /// let listener = ia.listen(7471)?;
    /// let ep = ia.create_ep(&pz, &EpEvds::single(&evd))?;
    /// let hello = listener.accept(&ep, b"welcome", Duration::from_secs(30))?;
    /// # Ok(()) }
    /// ```
    pub fn accept(&self, ep: &Arc<dyn Ep>, reply: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        let cr = self.next_request(timeout)?;
        let pd = cr.private_data().to_vec();
        cr.accept(ep, reply)?;
        Ok(pd)
    }

    /// Waits up to `timeout` for the next connection request and hands it
    /// over undecided (to look at its private data, then accept or reject).
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout) when none came in time.
    pub fn next_request(&self, timeout: Duration) -> Result<ConnRequest> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            // Only connection requests reach this EVD; anything else (an
            // asynchronous error of the listener) is not for an EP.
            if let Event::ConnectionRequest(cr) = self.evd.wait(Some(left), 1)? {
                return Ok(cr);
            }
        }
    }

    /// The service id listened on.
    pub fn service(&self) -> u16 {
        self.psp.service()
    }

    /// The local address, as a peer passes it to [`Ep::connect`].
    pub fn address(&self) -> String {
        self.psp.address()
    }

    /// The PSP itself.
    pub fn psp(&self) -> &Arc<dyn Psp> {
        &self.psp
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener({}:{})", self.address(), self.service())
    }
}
