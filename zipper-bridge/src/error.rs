//! The crate's own errors (world files, bridge set-up); transfer errors are
//! [`rmr_api::Error`]s.

/// Errors of world descriptions and of the bridge's set-up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZipperError {
    /// The world file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The world file is not valid TOML or misses a field.
    #[error("{path}:{line}: {msg}")]
    Syntax {
        /// The file (or `<string>`).
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// The world file is valid TOML but inconsistent (duplicate ranks, a
    /// bridge missing a side, an unknown cluster...).
    #[error("{path}:{line}: {msg}")]
    Inconsistent {
        /// The file (or `<string>`).
        path: String,
        /// 1-based line of the offending entry.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// A rank that the world does not have.
    #[error("no rank {0} in this world")]
    NoRank(u32),
    /// A transfer-layer error.
    #[error(transparent)]
    Rmr(#[from] rmr_api::Error),
}

/// Result alias of this crate's set-up functions.
pub type Result<T, E = ZipperError> = std::result::Result<T, E>;
