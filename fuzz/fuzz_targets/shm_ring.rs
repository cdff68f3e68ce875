//! The shm backend's ring parser and request handling: raw bytes from a
//! peer that breaks the protocol, against a real connected endpoint with
//! real registered regions (`backend_shm::hostile::Rig`). The honest side
//! must not crash and must never write memory it did not grant.
#![no_main]

use backend_shm::hostile::Rig;
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU32, Ordering};

fuzz_target!(|data: &[u8]| {
    static N: AtomicU32 = AtomicU32::new(0);
    let rig = Rig::new(&format!("fz{}x{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let _ = rig.feed(data);
});
