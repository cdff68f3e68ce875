//! The model client's demo kernels over [`rmr_dsm`] (the runtime itself
//! is that crate): Jacobi heat diffusion ([`heat`]) and a dense
//! matrix-vector product ([`matvec`]), each with a one-process reference
//! for the bit-for-bit check.

pub mod heat;
pub mod matvec;

pub use rmr_dsm::{Dsm, DsmConfig, DsmError, PAGE, Result};

/// Room per shared array for its start on a page boundary.
pub const PAGE_SLACK: usize = PAGE;
