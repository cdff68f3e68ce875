//! Async completions and connections on tokio (feature `tokio`).
//!
//! [`AsyncEvd`] turns an EVD into events you `.await`: it dequeues while
//! events are queued, drives the EVD's endpoints a moment in the calling
//! thread (50 µs, as a blocking waiter spins; other tasks wait that long
//! at most), and otherwise arms the EVD's wait descriptor
//! ([`Evd::wait_fd`] + [`Evd::arm`], libfabric's `fi_trywait` rule) and
//! sleeps on it in tokio's reactor (`AsyncFd`), so one runtime thread
//! serves any number of EVDs and endpoints. The backends' own progress
//! (the TCP backend's per-IA helper, libfabric's progress) moves the
//! bytes meanwhile.
//!
//! [`AsyncEvd::events`] gives the same events as a [`Stream`] (the
//! `futures` crates' trait, re-exported here), for `StreamExt` combinators
//! and `tokio_stream`.
//!
//! ## Cancellation
//! [`AsyncEvd::next`] (and the stream) takes an event off the EVD only in the step that
//! returns it: a future dropped while it waits (a `select!` that chose
//! another branch, a timeout) has taken nothing, and the next call gets
//! the event. Futures own no posted buffer: the buffers of posted DTOs
//! belong to the LMRs the caller holds, as with the blocking API, and
//! complete (or flush) whatever happens to a future.
//!
//! ## Example
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> rmr::Result<()> {
//! use rmr::aio::AsyncEvd;
//! use rmr::{EpEvds, Event};
//! let ia = rmr::open("tcp:127.0.0.1")?;
//! let (pz, evd, pevd) = (ia.create_pz()?, ia.create_evd()?, ia.create_evd()?);
//! let psp = ia.create_psp(0, &pevd)?;
//! let (events, requests) = (AsyncEvd::new(evd.clone())?, AsyncEvd::new(pevd)?);
//! let server = ia.create_ep(&pz, &EpEvds::single(&evd))?;
//! let client = ia.create_ep(&pz, &EpEvds::single(&evd))?;
//! // Connect in the background, accept here: one thread does both.
//! client.connect_start(&psp.address(), psp.service(), b"hi", std::time::Duration::from_secs(5))?;
//! let req = rmr::aio::accept(&requests).await?;
//! assert_eq!(req.private_data(), b"hi");
//! req.accept(&server, b"welcome")?;
//! let mut up = 0;
//! while up < 2 {
//!     if let Event::Established { .. } = events.next().await? {
//!         up += 1;
//!     }
//! }
//! # Ok(()) }
//! ```

use crate::{ConnRequest, Ep, Error, Evd, Event, Result};
pub use futures_core::Stream;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// How long [`AsyncEvd::next`] drives the EVD before it sleeps on the
/// descriptor, as a blocking waiter spins before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// An EVD whose events are awaited (see the module docs).
pub struct AsyncEvd {
    /// A duplicate of the EVD's wait descriptor (the same eventfd or
    /// completion channel), owned by the registration.
    fd: AsyncFd<OwnedFd>,
    evd: Arc<dyn Evd>,
}

impl AsyncEvd {
    /// Registers `evd`'s wait descriptor with the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an EVD without a wait descriptor;
    /// [`Error::Io`] when tokio cannot register it (called outside a
    /// runtime, or a runtime without IO enabled).
    pub fn new(evd: Arc<dyn Evd>) -> Result<AsyncEvd> {
        let dup = evd
            .wait_fd()
            .ok_or(Error::Unsupported("this EVD has no wait descriptor"))?
            .try_clone_to_owned()
            .map_err(|e| Error::io("duplicate the EVD's wait descriptor", e))?;
        // SAFETY: the descriptor is an `OwnedFd` that the `AsyncFd` owns for
        // its whole life: it stays open and refers to the same file.
        let fd =
            unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }.map_err(|e| {
                Error::io("register the EVD with tokio", std::io::Error::other(e.to_string()))
            })?;
        Ok(AsyncEvd { fd, evd })
    }

    /// The EVD.
    pub fn evd(&self) -> &Arc<dyn Evd> {
        &self.evd
    }

    /// The next event: at once when one is queued, else when one arrives.
    /// Cancellation-safe (see the module docs).
    ///
    /// # Errors
    /// [`Error::Io`] when the runtime's reactor fails.
    pub async fn next(&self) -> Result<Event> {
        let mut spun = false;
        loop {
            if let Some(ev) = self.evd.dequeue() {
                return Ok(ev);
            }
            // First drive the EVD's endpoints for a moment in this thread,
            // as a blocking waiter spins before it sleeps: an answer that
            // comes at once (a ping-pong) then needs no wake-up of the
            // backend's helper and of this thread. Other tasks wait at most
            // that moment.
            if !spun {
                spun = true;
                if self.evd.progress_until(Some(SPIN), Some(SPIN), &|| false) {
                    continue;
                }
            }
            if !self.evd.arm() {
                // Events or progress pending that a dequeue will see (or an
                // EVD whose rails cannot wake it): look again after letting
                // other tasks run.
                tokio::task::yield_now().await;
                continue;
            }
            // `readable()` wakes every task waiting on the descriptor, so
            // several tasks may share one `AsyncEvd`.
            let mut g = self.fd.readable().await.map_err(|e| Error::io("wait for the EVD", e))?;
            g.clear_ready();
        }
    }

    /// The EVD's events as a [`Stream`] (never ending; each item is what
    /// [`AsyncEvd::next`] returns). Dropping the stream, or a `select!`
    /// that stops polling it, loses no event: as with [`AsyncEvd::next`],
    /// an event leaves the EVD only in the poll that yields it. Several
    /// streams and `next()` calls may wait on one `AsyncEvd` at once.
    pub fn events(&self) -> Events<'_> {
        Events { evd: self, next: None }
    }

    /// [`AsyncEvd::next`] for at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when none came; [`AsyncEvd::next`]'s.
    pub async fn next_within(&self, timeout: Duration) -> Result<Event> {
        tokio::time::timeout(timeout, self.next()).await.map_err(|_| Error::Timeout)?
    }
}

/// The future of one [`AsyncEvd::next`].
type NextEvent<'a> = Pin<Box<dyn Future<Output = Result<Event>> + Send + 'a>>;

/// An [`AsyncEvd`]'s events as a [`Stream`] ([`AsyncEvd::events`]).
pub struct Events<'a> {
    evd: &'a AsyncEvd,
    /// The wait for the next item, while one is in progress.
    next: Option<NextEvent<'a>>,
}

impl Stream for Events<'_> {
    type Item = Result<Event>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Event>>> {
        let this = self.get_mut();
        let evd = this.evd;
        let next = this.next.get_or_insert_with(|| Box::pin(evd.next()));
        match next.as_mut().poll(cx) {
            Poll::Ready(r) => {
                this.next = None;
                Poll::Ready(Some(r))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Waits for the next connection request on a PSP's EVD (other events
/// there are skipped).
///
/// # Errors
/// [`AsyncEvd::next`]'s.
pub async fn accept(psp_evd: &AsyncEvd) -> Result<ConnRequest> {
    loop {
        if let Event::ConnectionRequest(cr) = psp_evd.next().await? {
            return Ok(cr);
        }
    }
}

/// Connects `ep` (started with [`Ep::connect_start`]) and waits for the
/// outcome on `conn_evd`, which must be `ep`'s connection EVD and report
/// no other endpoint's connection events (they would be consumed).
/// Returns the peer's private data.
///
/// # Errors
/// [`Error::Rejected`] with the peer's private data; [`Error::Broken`]
/// for a refused or unreachable peer or a passed `timeout`;
/// [`Ep::connect_start`]'s input errors.
pub async fn connect(
    ep: &dyn Ep,
    conn_evd: &AsyncEvd,
    remote: &str,
    service: u16,
    private_data: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    ep.connect_start(remote, service, private_data, timeout)?;
    let me = ep.id();
    loop {
        match conn_evd.next().await? {
            Event::Established { ep, private_data } if ep == me => return Ok(private_data),
            Event::Rejected { ep, private_data } if ep == me => {
                return Err(Error::Rejected { private_data });
            }
            Event::Broken { ep, reason } if ep == me => return Err(Error::Broken(reason)),
            _ => {}
        }
    }
}
