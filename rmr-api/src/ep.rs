//! The connection objects: [`Ep`], a reliable connected endpoint that
//! posts DTOs, and [`Psp`], a service point that listens for connections.
//!
//! Like every object trait they are object-safe and `Send + Sync`:
//! applications hold them as `Arc<dyn Trait>`, and a multirail endpoint
//! holds rails of different backends side by side.

use crate::error::{Error, Result};
use crate::lmr::Sge;
use crate::remote::RemoteAddr;
use crate::types::{CompareSwap, Cookie, DtoFlags, EpAttr, EpId, EpState};
use std::any::Any;
use std::time::Duration;

/// A public service point: listens for connection requests on a service id.
pub trait Psp: Send + Sync {
    /// The service id actually listened on.
    fn service(&self) -> u16;
    /// The local address, as a peer passes it to [`Ep::connect`].
    fn address(&self) -> String;
    /// Stops listening; pending requests are rejected.
    fn close(&self);
}

/// A reliable connected endpoint.
///
/// Ordering (uDAPL's rules, kept by every backend): receives complete in the
/// order their sends were posted, and an RDMA write posted before a send is
/// visible at the target before the matching receive completes.
pub trait Ep: Send + Sync {
    /// Process-unique id, as carried by events.
    fn id(&self) -> EpId;
    /// Attributes.
    fn attr(&self) -> EpAttr;
    /// Connection state.
    fn state(&self) -> EpState;
    /// Connects to `service` at `remote` (an address in the provider's
    /// syntax), sending `private_data`; blocks until established, rejected
    /// or `timeout`. Returns the peer's private data. An
    /// `Event::Established` is also posted on the connection EVD.
    ///
    /// # Errors
    /// [`Error::Rejected`], [`Error::Timeout`], [`Error::Io`] (refused, unreachable).
    fn connect(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>>;
    /// Starts connecting to `service` at `remote` with `private_data` and
    /// returns at once: the outcome arrives on the connection EVD, as
    /// `Event::Established` (the peer's private data; the EP is then
    /// Connected), `Event::Rejected`, or `Event::Broken` with the reason (refused,
    /// unreachable, or `timeout` passed; the EP is then Unconnected again
    /// and may connect anew). How a process opens connections to many
    /// peers at once without a thread per pending connection.
    ///
    /// The TCP backend connects in the background (its IA's progress
    /// engine carries the handshake). The default, which the other
    /// transports use, connects with [`Ep::connect`] before returning
    /// (Established and Rejected are posted as `connect` posts them; any
    /// other failure is returned here instead of posted).
    ///
    /// # Errors
    /// Input errors at once ([`Error::BadSpec`], [`Error::InvalidArgument`]
    /// for an EP that is not Unconnected or private data too long); with
    /// the default, also [`Ep::connect`]'s.
    fn connect_start(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<()> {
        self.connect(remote, service, private_data, timeout).map(|_| ())
    }
    /// Closes the connection; both sides get `Event::Disconnected`,
    /// outstanding DTOs complete with [`crate::Status::Flushed`].
    ///
    /// # Errors
    /// [`Error::NotConnected`] when there is nothing to close.
    fn disconnect(&self) -> Result<()>;
    /// Posts a send of the gathered `local` segments.
    ///
    /// # Errors
    /// Local errors synchronously ([`Error::Protection`], [`Error::OutOfBounds`],
    /// [`Error::QueueFull`], [`Error::NotConnected`]); remote ones as error completions.
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_send(&[Sge::new(lmr, 0, 8)], Cookie(1), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_send(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()>;
    /// Posts a receive buffer (scatter list). Receives may be posted
    /// before the endpoint is connected (before [`Ep::connect`], or on an
    /// endpoint about to be given to an accept), so that none of the
    /// peer's first messages finds no receive posted.
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_recv(&[Sge::whole(lmr)], Cookie(2), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_recv(&self, local: &[Sge<'_>], cookie: Cookie, flags: DtoFlags) -> Result<()>;
    /// RDMA-writes the gathered `local` segments to `remote` (a peer's
    /// region and an offset, [`RmrContext::at`](crate::RmrContext::at)).
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// // The whole LMR to byte 4096 of the peer's region, no completion event.
    /// ep.post_rdma_write(&[Sge::whole(lmr)], peer.at(4096), Cookie(3), DtoFlags::SUPPRESS)?;
    /// # Ok(()) }
    /// ```
    fn post_rdma_write(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()>;
    /// RDMA-reads `remote` into the scattered `local` segments.
    ///
    /// # Errors
    /// As [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_rdma_read(&[Sge::new(lmr, 0, 64)], peer.at(0), Cookie(4), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_rdma_read(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()>;
    /// RDMA write with 32-bit immediate data: consumes a receive at the target,
    /// whose completion ([`crate::DtoOp::RecvWriteImm`]) carries `imm`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`crate::Caps::WRITE_IMM`] is absent; else as [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, lmr: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// // The data and, in the peer's receive completion, the number 42.
    /// ep.post_rdma_write_imm(&[Sge::whole(lmr)], peer.at(0), 42, Cookie(8), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_rdma_write_imm(
        &self,
        local: &[Sge<'_>],
        remote: RemoteAddr<'_>,
        imm: u32,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (local, remote, imm, cookie, flags);
        Err(Error::Unsupported("rdma write with immediate"))
    }
    /// Atomically adds `add` to the 8-byte aligned word at `remote`;
    /// the old value lands in `result` (8 bytes) and in the completion's `imm`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when [`crate::Caps::ATOMICS`] is absent; else as [`Ep::post_send`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, old: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{Cookie, DtoFlags, Sge};
    /// ep.post_fetch_add(Sge::new(old, 0, 8), peer.at(0), 1, Cookie(5), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_fetch_add(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        add: u64,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (result, remote, add, cookie, flags);
        Err(Error::Unsupported("fetch-and-add"))
    }
    /// Atomically replaces the word at `remote` with `op.swap` if it
    /// equals `op.compare`; the old value lands in `result` and the completion's `imm`.
    ///
    /// # Errors
    /// As [`Ep::post_fetch_add`].
    ///
    /// # Example
    /// ```no_run
    /// # fn f(ep: &dyn rmr_api::Ep, old: &dyn rmr_api::Lmr, peer: rmr_api::RmrContext) -> rmr_api::Result<()> {
    /// use rmr_api::{CompareSwap, Cookie, DtoFlags, Sge};
    /// let take_lock = CompareSwap { compare: 0, swap: 1 };
    /// ep.post_cmp_swap(Sge::new(old, 0, 8), peer.at(0), take_lock, Cookie(6), DtoFlags::empty())?;
    /// # Ok(()) }
    /// ```
    fn post_cmp_swap(
        &self,
        result: Sge<'_>,
        remote: RemoteAddr<'_>,
        op: CompareSwap,
        cookie: Cookie,
        flags: DtoFlags,
    ) -> Result<()> {
        let _ = (result, remote, op, cookie, flags);
        Err(Error::Unsupported("compare-and-swap"))
    }
    /// Ends the connection once what was posted on it has been delivered:
    /// every DTO posted before (suppressed ones included) reaches the peer
    /// ahead of the disconnect, and this waits up to `timeout` until the
    /// peer has confirmed the end (for the transports that can tell). A peer
    /// that closed first is not an error. This is how a program ends that
    /// must not exit while its last messages are still on their way — no
    /// sleeps. The default is [`Ep::disconnect`], which such transports
    /// order behind what was posted.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the peer did not confirm in time (the
    /// endpoint is disconnected all the same); the disconnect's errors
    /// other than [`Error::NotConnected`].
    fn close(&self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        match self.disconnect() {
            Ok(()) | Err(Error::NotConnected) => Ok(()),
            Err(e) => Err(e),
        }
    }
    /// The peer's address once connected.
    fn peer_address(&self) -> Option<String>;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

impl dyn Ep {
    /// [`Ep::connect`], retried while the peer refuses (it has not started
    /// listening yet), until `timeout` has passed in all: how a client that
    /// may start before its server connects. A rejection is not retried.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the peer never accepted in time;
    /// [`Error::Rejected`] and the connect's other errors at once.
    pub fn connect_with_retry(
        &self,
        remote: &str,
        service: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut nap = Duration::from_millis(1);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            match self.connect(remote, service, private_data, left) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::ConnectionRefused =>
                {
                    tracing::debug!(target: "rmr", remote, service, "connection refused; retrying");
                    std::thread::sleep(nap.min(left));
                    nap = (nap * 2).min(Duration::from_millis(100));
                }
                r => return r,
            }
        }
    }
}
