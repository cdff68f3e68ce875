//! The one error type of the API and the `Result` alias.

use crate::types::{DtoOp, EpId, Status};
use std::io;

/// Errors returned by every rmr-api operation.
///
/// The variants are matchable: a remote access fault, a protection fault, a
/// bad key, a broken connection and a timeout are distinct so that a runtime
/// can react to each (retry on another rail, re-register, give up).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The named provider is not registered in this process.
    #[error("unknown provider `{name}` (registered: {known})")]
    UnknownProvider {
        /// The provider name from the spec string.
        name: String,
        /// Comma-separated list of the providers that are registered.
        known: String,
    },
    /// A spec string or address could not be parsed.
    #[error("bad spec `{spec}`: {why}")]
    BadSpec {
        /// The spec that was given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A setting (an environment variable, a spec option) has a value that
    /// does not parse: nothing falls back to a default in silence.
    #[error("bad setting {var}={value:?}: {accepted}")]
    BadSetting {
        /// The variable or option.
        var: String,
        /// The value given.
        value: String,
        /// What is wrong and what is accepted.
        accepted: String,
    },
    /// The backend cannot run here: a library, a kernel module or a device is missing.
    #[error("no device: {what}")]
    NoDevice {
        /// What is missing, in words a user can act on.
        what: String,
    },
    /// The target rejected an RDMA access (rights missing, region deregistered).
    #[error("remote access error: {0}")]
    RemoteAccess(String),
    /// Memory of one protection zone was used with an endpoint of another.
    #[error("protection error: {0}")]
    Protection(String),
    /// A DTO ended with an error completion (the target refused it, the
    /// connection broke under it, ...): what the completion says, nothing
    /// invented. Match on `status` for the kind (for example
    /// [`Status::BadKey`], [`Status::ReceiverNotReady`]); see also
    /// [`Error::status`].
    #[error("{op:?} on endpoint {}{} failed: {status}", ep.0, rail.map(|r| format!(" (rail {r})")).unwrap_or_default())]
    Dto {
        /// The operation.
        op: DtoOp,
        /// The endpoint it was posted on (names the peer).
        ep: EpId,
        /// How it ended.
        #[source]
        status: Status,
        /// Bytes the completion reports (for a receive: the message's size).
        bytes: u64,
        /// On a multirail endpoint, the rail whose failure ended the DTO.
        rail: Option<u8>,
    },
    /// An access outside a registered region (local or remote).
    #[error("out of bounds: offset {offset} + length {len} exceeds {limit}")]
    OutOfBounds {
        /// First byte of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the region that was addressed.
        limit: u64,
    },
    /// The receive buffer posted at the target is smaller than the message.
    #[error("receive buffer too small: message of {need} bytes, buffer of {have}")]
    RecvTooSmall {
        /// Size of the incoming message.
        need: u64,
        /// Size of the posted receive buffer.
        have: u64,
    },
    /// The connection is broken (peer died, link lost, stream corrupted).
    #[error("connection broken: {0}")]
    Broken(String),
    /// The endpoint was ended because its peer consumed nothing for
    /// `waited` while work waited to reach it (a peer that stopped reading
    /// but still acknowledged at the transport level); its resources are
    /// freed, its DTOs completed with [`crate::Status::Broken`].
    #[error("peer stalled: it consumed nothing for {waited:?} while work waited for it")]
    PeerStalled {
        /// How long nothing moved.
        waited: std::time::Duration,
    },
    /// The endpoint is not connected (never connected, or disconnected).
    #[error("endpoint not connected")]
    NotConnected,
    /// The DTO was flushed because its endpoint disconnected or broke first.
    #[error("operation flushed: endpoint disconnected")]
    Flushed,
    /// The peer rejected the connection request.
    #[error("connection rejected by peer ({} bytes of private data)", private_data.len())]
    Rejected {
        /// Private data the peer sent with its rejection.
        private_data: Vec<u8>,
    },
    /// The operation did not finish in the time given.
    #[error("timed out")]
    Timeout,
    /// The operation is not supported by this provider (see [`crate::IaAttr::caps`]).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// A work queue is full; retry after completions were reaped.
    #[error("queue full")]
    QueueFull,
    /// A parameter is invalid (wrong provider's object, bad alignment, too many segments...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer sent bytes that break the wire protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// Which call or step failed.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A backend-specific failure (libfabric, verbs) with the failing call named.
    #[error("{call} failed: {msg}")]
    Backend {
        /// The failing library call, e.g. `fi_getinfo`.
        call: String,
        /// The library's own text (fi_strerror, strerror).
        msg: String,
    },
}

impl Error {
    /// Wraps an `io::Error` with the step that failed.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }

    /// The completion status this error stands for, for code that treats
    /// local and remote failures alike: the status of an [`Error::Dto`],
    /// and the status a local check would have reported for the matching
    /// synchronous error ([`Error::OutOfBounds`], [`Error::Protection`],
    /// [`Error::RemoteAccess`], [`Error::RecvTooSmall`], [`Error::Flushed`],
    /// [`Error::Broken`], [`Error::Unsupported`]).
    pub fn status(&self) -> Option<Status> {
        Some(match self {
            Error::Dto { status, .. } => *status,
            Error::OutOfBounds { .. } => Status::OutOfBounds,
            Error::Protection(_) => Status::Protection,
            Error::RemoteAccess(_) => Status::RemoteAccess,
            Error::RecvTooSmall { .. } => Status::RecvTooSmall,
            Error::Flushed => Status::Flushed,
            Error::Broken(_) | Error::PeerStalled { .. } => Status::Broken,
            Error::Unsupported(_) => Status::Unsupported,
            _ => return None,
        })
    }

    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(why: impl Into<String>) -> Self {
        Error::InvalidArgument(why.into())
    }
}

/// Result alias used across the API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
