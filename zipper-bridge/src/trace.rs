//! Event tracing for diagnostics: the bridge and bridged endpoints emit
//! one `tracing` event per protocol event (target `rmr::zipper`, level
//! trace; `RUST_LOG=rmr::zipper=trace` in the binaries). Off (a check of
//! the subscriber's level) otherwise.

/// One protocol event (the text built only when tracing is on).
pub(crate) fn line(f: impl FnOnce() -> String) {
    if tracing::enabled!(target: "rmr::zipper", tracing::Level::TRACE) {
        tracing::trace!(target: "rmr::zipper", "{}", f());
    }
}

/// A short picture of an event.
pub(crate) fn ev(e: &rmr_api::Event) -> String {
    match e {
        rmr_api::Event::Dto(c) => format!(
            "dto ep {} cookie {:#x} {:?} {:?} {}B",
            c.ep.0, c.cookie.0, c.op, c.status, c.bytes
        ),
        e => format!("{e:?}"),
    }
}
