//! The libraries behind the examples: the shared-memory runtime (`dsm`,
//! the model client) and the soak test (`soak`). The example programs
//! themselves use only the public `rmr` API.

pub mod dsm;
pub mod soak;

/// Prints rmr's `tracing` events to stderr, filtered by `RUST_LOG`
/// (e.g. `RUST_LOG=rmr=debug`; nothing when unset).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
}
