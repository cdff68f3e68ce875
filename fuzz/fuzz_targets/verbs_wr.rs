//! The verbs backend's peer-facing pure code: connection private data, the
//! remote context a peer hands out and the WR targets built from it, work
//! request planning and work completions. See backend-verbs/src/fuzzing.rs
//! for what every input must get.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    backend_verbs::fuzzing::peer_bytes(data);
});
