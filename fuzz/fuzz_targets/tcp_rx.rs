//! The TCP backend's receive path — frame parser, key/rights/PZ/bounds
//! checks, payload placement into registered memory, responses — fed
//! through a real loopback connection by a raw peer. See
//! backend-tcp/tests/support/rig.rs for the invariants checked per input.
#![no_main]

#[path = "../../backend-tcp/tests/support/rig.rs"]
mod rig;

use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};

static RIG: OnceLock<Mutex<rig::Rig>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let mut r = RIG.get_or_init(|| Mutex::new(rig::Rig::new())).lock().unwrap();
    let (stream, chunks, recvs, read, atomic) = rig::build(&r, data);
    r.feed(&stream, &chunks, recvs, read, atomic);
});
