//! The world file parser (zipper-bridge/src/world.rs): any text is either
//! accepted or refused with an error naming a line inside it; no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = zipper_bridge::fuzzing::world_text(data);
});
