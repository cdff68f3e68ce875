//! The crate's error type and `Result` alias.

use std::io;
use std::time::Duration;

/// Errors of the bootstrap.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable is missing or malformed.
    #[error("bad environment: {var}={value:?}: {why}")]
    BadEnv {
        /// The variable.
        var: &'static str,
        /// Its value (empty when unset).
        value: String,
        /// What is wrong.
        why: String,
    },
    /// A launcher was asked for (or found) that this build or machine cannot use.
    #[error("bootstrap `{kind}` unavailable: {why}")]
    Unavailable {
        /// `pmix` or `rendezvous`.
        kind: &'static str,
        /// What is missing, in words a user can act on.
        why: String,
    },
    /// The rendezvous root waited in vain for some ranks.
    #[error("ranks {missing:?} of {size} never showed up at the rendezvous within {waited:?}")]
    RanksMissing {
        /// The ranks that did not connect.
        missing: Vec<u32>,
        /// The job size.
        size: u32,
        /// How long the root waited.
        waited: Duration,
    },
    /// A non-root rank could not reach the rendezvous root in time.
    #[error("rendezvous root {root} unreachable for {waited:?}: {source}")]
    RootUnreachable {
        /// The root address.
        root: String,
        /// How long this rank tried.
        waited: Duration,
        /// The last connection error.
        #[source]
        source: io::Error,
    },
    /// The rendezvous root could not prove that it holds the job's secret:
    /// nothing of this rank's was sent to it.
    #[error("rendezvous root {root} is not this job's: {why}")]
    Unauthenticated {
        /// The root's address (`RMR_ROOT`).
        root: String,
        /// What did not hold.
        why: String,
    },
    /// The root ended the job (another rank failed, or the job is inconsistent).
    #[error("rendezvous aborted by the root: {0}")]
    Aborted(String),
    /// A peer's connection to the rendezvous broke (its process died).
    #[error("rank {rank} left the rendezvous: {why}")]
    PeerLost {
        /// The rank whose connection broke (0 = the root).
        rank: u32,
        /// What happened.
        why: String,
    },
    /// A collective did not finish in time.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// Which operation.
        what: &'static str,
        /// The limit.
        after: Duration,
    },
    /// A peer sent bytes that break the rendezvous protocol (or another
    /// program answered at the root address).
    #[error("rendezvous protocol error: {0}")]
    Protocol(String),
    /// A PMIx call failed.
    #[error("{call} failed: {msg} (status {status})")]
    Pmix {
        /// The PMIx call.
        call: &'static str,
        /// `PMIx_Error_string`.
        msg: String,
        /// The raw `pmix_status_t`.
        status: i32,
    },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// Which step failed.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
