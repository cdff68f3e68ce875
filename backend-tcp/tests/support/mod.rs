//! Test support shared by backend-tcp's integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod raw;
pub mod rig;
