//! The zipper bridge's control messages: the header of every bridged
//! message (credits, acknowledgements, chunk offsets, errors) and the
//! connection private data of the bridge protocol (ZPC1/ZPB1/ZPR1). See
//! zipper-bridge/src/fuzzing.rs for what every input must get.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    zipper_bridge::fuzzing::control_bytes(data);
});
