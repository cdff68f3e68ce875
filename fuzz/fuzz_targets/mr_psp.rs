//! The multirail PSP's handshake header (multirail/src/psp.rs), through a
//! real multirail PSP over two loopback TCP rails. See
//! multirail/tests/support/mr_rig.rs for what every input must get.
#![no_main]

#[path = "../../multirail/tests/support/mr_rig.rs"]
mod mr_rig;

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static RIG: OnceLock<mr_rig::MrRig> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let r = RIG.get_or_init(mr_rig::MrRig::new);
    let (rail, pd) = mr_rig::build(data);
    r.feed(rail, &pd);
});
