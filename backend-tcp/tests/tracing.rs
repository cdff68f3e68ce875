//! What a user sees with a `tracing` subscriber installed (as the binaries
//! do with `RUST_LOG`): the connect span and an error completion, as events
//! from whichever thread met them, while rmr-api's conformance case
//! `bad_key` runs (a connected pair, a write with a forged key). One test
//! in its own binary: the subscriber is the process's.

use rmr_api::provider::conformance::{Target, capture_tracing, cases};

#[test]
fn error_completions_and_connect_spans_reach_a_subscriber() {
    let text = capture_tracing(|| {
        cases::bad_key(&Target::new("tcp", backend_tcp::register, "tcp:127.0.0.1", "tcp:127.0.0.1"))
    });
    println!("{text}");
    assert!(text.contains("error completion") && text.contains("cookie=1"), "{text}");
    assert!(text.contains("connect{") && text.contains("connected"), "the connect span: {text}");
    assert!(text.contains("accept{") && text.contains("accepted"), "the accept span: {text}");
}
