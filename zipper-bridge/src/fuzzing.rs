//! Entry points for the fuzz targets (`fuzz/fuzz_targets/zb_ctrl.rs`,
//! `fuzz/fuzz_targets/world_file.rs`) and for their regression replay
//! (`tests/fuzz_regressions.rs`). Not a stable API.
//!
//! Each function runs every decoder that bytes from a peer (or a world file
//! from a user) reach, and checks what must hold for any input: no panic,
//! and whatever decodes encodes back to the same value.

use crate::handshake::{BridgeHello, ClientHello, Reply};
use crate::wire::Header;

/// Runs the bridge's control-message decoders on `b`: the message header
/// every bridged message starts with, and the three connection private
/// data headers (`ZPC1`, `ZPB1`, `ZPR1`). Panics if a decoded value does
/// not survive an encode/decode round trip or points outside `b`.
pub fn control_bytes(b: &[u8]) {
    if let Some(h) = Header::decode(b) {
        assert_eq!(Header::decode(&h.encode()), Some(h), "header round trip");
    }
    if let Some(c) = ClientHello::decode(b) {
        assert!(c.chunk > 0 && c.ring.data > 0, "accepted an empty ring or chunk");
        assert!(b.ends_with(c.user), "user data is the input's tail");
        assert_eq!(ClientHello::decode(&c.encode()), Some(c), "ZPC1 round trip");
    }
    if let Some(h) = BridgeHello::decode(b) {
        assert!(b.ends_with(h.user), "user data is the input's tail");
        assert_eq!(BridgeHello::decode(&h.encode()), Some(h), "ZPB1 round trip");
    }
    if let Some(r) = Reply::decode(b) {
        assert!(b.ends_with(r.user), "user data is the input's tail");
        assert_eq!(Reply::decode(&r.encode()), Some(r), "ZPR1 round trip");
    }
}

/// Parses `b` (as UTF-8, lossily) as a world file. Returns whether it was
/// accepted; an error must name a line inside the text.
pub fn world_text(b: &[u8]) -> bool {
    let text = String::from_utf8_lossy(b);
    match crate::WorldDesc::parse(&text, "fuzz.toml") {
        Ok(_) => true,
        Err(e) => {
            let lines = text.lines().count().max(1);
            let line = match &e {
                crate::ZipperError::Syntax { line, .. }
                | crate::ZipperError::Inconsistent { line, .. } => Some(*line),
                _ => None,
            };
            if let Some(l) = line {
                assert!(l >= 1 && l <= lines + 1, "error names line {l} of {lines}: {e}");
            }
            assert!(!e.to_string().is_empty());
            false
        }
    }
}
