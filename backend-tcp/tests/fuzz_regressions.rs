//! Replays every input kept in `fuzz-regressions/` (crashes and hangs that
//! cargo-fuzz found, once fixed, plus seeds that reach each receive path)
//! through the same rig the fuzz targets use: the real TCP endpoint on
//! loopback with real registered regions. A plain `cargo test` runs them.

mod support;

use backend_tcp::wire::{HDR, Header, StreamState};
use std::path::PathBuf;
use support::rig;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    rmr_api::provider::conformance::regression_inputs(env!("CARGO_MANIFEST_DIR"), target)
}

#[test]
fn replay_tcp_rx() {
    let files = inputs("tcp_rx");
    assert!(!files.is_empty(), "no tcp_rx regression inputs");
    let mut rig = rig::Rig::new();
    for (path, data) in &files {
        let (stream, chunks, recvs, read, atomic) = rig::build(&rig, data);
        let out = rig.feed(&stream, &chunks, recvs, read, atomic);
        println!(
            "{}: {} bytes fed, {} completions, {}",
            path.display(),
            out.fed,
            out.completions,
            out.ended
        );
    }
}

#[test]
fn replay_wire_header() {
    for (path, data) in inputs("wire_header") {
        // The live stream's codec over the whole input, as the reader runs
        // it: each header, written again after the same stream, decodes to
        // itself.
        let (mut at, mut st) = (0, StreamState::default());
        loop {
            let before = st;
            let Ok(Some((h, n))) = st.decode(&data[at..]) else { break };
            let _ = h.validate();
            let (mut sent, mut out) = (before.last_ack, [0u8; HDR]);
            let m = h.encode_data(&mut sent, &mut out);
            let mut again = before;
            assert_eq!(again.decode(&out[..m]), Ok(Some((h, m))), "{}", path.display());
            at += n;
        }
        if data.len() < HDR {
            continue;
        }
        let b: &[u8; HDR] = data[..HDR].try_into().unwrap();
        let h = Header::decode(b);
        assert_eq!(&h.encode(), b, "{}", path.display());
        let _ = h.validate();
    }
}
