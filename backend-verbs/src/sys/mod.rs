//! The FFI layer: every `unsafe` of the crate lives in this module's files,
//! each call with a `// SAFETY:` line. Above it the backend is safe code.
//!
//! - [`device`]: device discovery, device and port limits, async events.
//! - [`cm`]: rdma_cm event channel and ids (addressing, connections, QPs).
//! - [`pd`], [`mr`], [`cq`], [`qp`]: protection domain, memory region,
//!   completion queue with its channel, posting work requests.
//! - [`fd`]: eventfd, epoll and poll for blocking waits.

pub(crate) mod cm;
pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod fd;
pub(crate) mod mr;
pub(crate) mod pd;
pub(crate) mod qp;

use rmr_api::Error;
use std::ffi::c_char;
use std::io;

/// An `Error::Backend` naming the failed call with `strerror(errno)`.
pub(crate) fn last_err(call: &str) -> Error {
    errno_err(call, io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// An `Error::Backend` for an errno value returned directly (ibv_post_*).
pub(crate) fn errno_err(call: &str, errno: i32) -> Error {
    Error::Backend { call: call.into(), msg: io::Error::from_raw_os_error(errno).to_string() }
}

/// The current errno.
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Copies a fixed-size `char` array that holds a NUL-terminated name.
pub(crate) fn name_of(a: &[c_char]) -> String {
    let bytes: Vec<u8> = a.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
