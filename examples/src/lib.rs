//! The libraries behind the examples: the shared-memory runtime (`dsm`,
//! the model client) and the soak test (`soak`). The example programs
//! themselves use only the public `rmr` API.

pub mod dsm;
pub mod soak;
