//! What a user sees of the libfabric backend with a `tracing` subscriber
//! installed (as the binaries do with `RUST_LOG`): the connect and accept
//! spans with their outcomes, and an error completion, while rmr-api's
//! conformance case `bad_key` runs. One test in its own binary: the
//! subscriber is the process's.

use rmr_api::provider::conformance::{Target, capture_tracing, cases};

#[test]
fn ofi_connect_and_accept_spans_and_error_completions_reach_a_subscriber() {
    let text = capture_tracing(|| {
        cases::bad_key(&Target::new(
            "ofi",
            backend_ofi::register,
            "ofi:tcp:127.0.0.1",
            "ofi:tcp:127.0.0.1",
        ))
    });
    println!("{text}");
    assert!(text.contains("error completion") && text.contains("cookie=1"), "{text}");
    assert!(text.contains("connect{") && text.contains("connected"), "the connect span: {text}");
    assert!(text.contains("accept{") && text.contains("accepted"), "the accept span: {text}");
}
