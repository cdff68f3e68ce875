//! The crate's error type and `Result` alias.

use std::time::Duration;

/// Errors of the collectives.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An rmr-api call failed (opening, registering, connecting, posting).
    #[error(transparent)]
    Api(#[from] rmr_api::Error),
    /// The bootstrap failed (a rank missing, a peer lost, PMIx).
    #[error(transparent)]
    Boot(#[from] rmr_boot::Error),
    /// A peer's signal did not arrive in time.
    #[error("barrier {seq}: no signal from rank {rank} within {after:?}")]
    Timeout {
        /// The barrier's sequence number.
        seq: u64,
        /// The rank waited for (`usize::MAX`: a process of this node).
        rank: usize,
        /// The limit.
        after: Duration,
    },
    /// A connection of the barrier broke or a DTO of it failed.
    #[error("barrier link to rank {rank} failed: {why}")]
    Link {
        /// The peer's rank (`usize::MAX` when unknown).
        rank: usize,
        /// What happened.
        why: String,
    },
    /// The node's shared-memory file could not be created or mapped.
    #[error("shared memory {path}: {source}")]
    Shm {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A peer's start-up data was malformed.
    #[error("barrier set-up: {0}")]
    Setup(String),
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
