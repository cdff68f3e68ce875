//! Test support shared by backend-tcp's integration tests.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::type_complexity)]

pub mod raw;
pub mod rig;
