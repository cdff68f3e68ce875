//! What an EVD delivers: [`Event`], with [`DtoCompletion`] (a finished
//! DTO) and [`ConnRequest`] (a peer asking a service point to connect).

use crate::ep::Ep;
use crate::error::{Error, Result};
use crate::types::{Cookie, DtoOp, EpId, Status};
use std::fmt;
use std::sync::Arc;

/// Completion of one data transfer operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtoCompletion {
    /// The endpoint the DTO was posted on.
    pub ep: EpId,
    /// The user's cookie given at post time.
    pub cookie: Cookie,
    /// Which operation.
    pub op: DtoOp,
    /// How it ended.
    pub status: Status,
    /// Bytes transferred (received bytes for a receive).
    pub bytes: u64,
    /// Immediate data of a write-with-immediate receive, or the old value
    /// returned by an atomic, when there is one.
    pub imm: Option<u64>,
    /// A receive of a message sent with [`crate::DtoFlags::SOLICITED`].
    pub solicited: bool,
    /// On a multirail endpoint, the rail whose failure ended the DTO
    /// (`None` elsewhere, and for a DTO that succeeded).
    pub rail: Option<u8>,
}

impl DtoCompletion {
    /// A completion with no immediate data and not solicited (what most
    /// completions a backend makes are).
    pub fn new(ep: EpId, cookie: Cookie, op: DtoOp, status: Status, bytes: u64) -> Self {
        DtoCompletion { ep, cookie, op, status, bytes, imm: None, solicited: false, rail: None }
    }

    /// `Ok(())` for success, otherwise the matching [`crate::Error`].
    ///
    /// # Errors
    /// [`crate::Error::Dto`] with this completion's operation, endpoint and
    /// status when it did not succeed.
    pub fn result(&self) -> Result<()> {
        if self.status.is_ok() {
            Ok(())
        } else {
            Err(Error::Dto {
                op: self.op,
                ep: self.ep,
                status: self.status,
                bytes: self.bytes,
                rail: self.rail,
            })
        }
    }
}

/// The backend side of a pending connection request.
pub trait ConnRequestOps: Send + Sync {
    /// Accepts the request onto `ep` (created on the PSP's IA, unconnected),
    /// returning `private_data` to the connector.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for an EP of another provider or one
    /// already connected; [`crate::Error::Broken`] when the connector has gone.
    fn accept(&self, ep: &Arc<dyn Ep>, private_data: &[u8]) -> Result<()>;
    /// Rejects the request, returning `private_data` to the connector.
    ///
    /// # Errors
    /// [`crate::Error::Broken`] when the connector has gone (nothing to tell).
    fn reject(&self, private_data: &[u8]) -> Result<()>;
    /// The connector's private data.
    fn private_data(&self) -> &[u8];
    /// The connector's address, as text.
    fn peer(&self) -> String;
}

/// A connection request that arrived at a PSP.
#[derive(Clone)]
pub struct ConnRequest(pub Arc<dyn ConnRequestOps>);

impl ConnRequest {
    /// The connector's private data.
    pub fn private_data(&self) -> &[u8] {
        self.0.private_data()
    }
    /// Accepts onto `ep`; see [`ConnRequestOps::accept`].
    ///
    /// # Errors
    /// As [`ConnRequestOps::accept`].
    pub fn accept(&self, ep: &Arc<dyn Ep>, private_data: &[u8]) -> Result<()> {
        self.0.accept(ep, private_data)
    }
    /// Rejects; see [`ConnRequestOps::reject`].
    ///
    /// # Errors
    /// As [`ConnRequestOps::reject`].
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        self.0.reject(private_data)
    }
    /// The connector's address.
    pub fn peer(&self) -> String {
        self.0.peer()
    }
}

impl fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnRequest(from {}, {} bytes)", self.peer(), self.private_data().len())
    }
}

/// An event.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// A DTO completed (successfully or not).
    Dto(DtoCompletion),
    /// A peer asks to connect to a PSP.
    ConnectionRequest(ConnRequest),
    /// A connection is established; carries the peer's private data.
    Established {
        /// The endpoint.
        ep: EpId,
        /// Private data from the peer's accept (or connect, at the passive side).
        private_data: Vec<u8>,
    },
    /// A connect was rejected by the peer.
    Rejected {
        /// The endpoint.
        ep: EpId,
        /// Private data the peer sent with its rejection.
        private_data: Vec<u8>,
    },
    /// The connection was closed in an orderly way (by either side).
    Disconnected {
        /// The endpoint.
        ep: EpId,
    },
    /// The connection broke: peer died, link lost or the stream became untrustworthy.
    Broken {
        /// The endpoint.
        ep: EpId,
        /// What happened.
        reason: String,
    },
    /// One rail of a multirail endpoint was lost; the endpoint goes on over
    /// the others (the last rail's loss is [`Event::Broken`] instead). Its
    /// unfinished stripes go again on the survivors, and the endpoint tries
    /// to bring the rail back ([`Event::RailUp`] when it does).
    RailDown {
        /// The multirail endpoint.
        ep: EpId,
        /// The rail's index (its place in the IA's rail list).
        rail: u8,
        /// Why the rail was lost.
        reason: String,
    },
    /// A rail lost earlier ([`Event::RailDown`]) was connected again, as the
    /// same endpoint's rail, and carries traffic again.
    RailUp {
        /// The multirail endpoint.
        ep: EpId,
        /// The rail's index.
        rail: u8,
    },
    /// An asynchronous error not tied to one DTO.
    AsyncError {
        /// The endpoint concerned, when there is one.
        ep: Option<EpId>,
        /// What happened.
        what: String,
    },
    /// A software event posted with `Evd::post_software`.
    Software(u64),
}

impl Event {
    /// The DTO completion, if this is one.
    pub fn as_dto(&self) -> Option<&DtoCompletion> {
        match self {
            Event::Dto(c) => Some(c),
            _ => None,
        }
    }
}
