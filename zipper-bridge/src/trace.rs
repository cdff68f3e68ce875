//! Event tracing for diagnostics: with `RMR_ZIP_TRACE=<path>` set, the
//! bridge and bridged endpoints append one line per protocol event to
//! `<path>.<pid>` (microseconds since the first line, thread, text).
//! Off (one relaxed load) otherwise.

use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

struct Sink {
    t0: Instant,
    file: Mutex<std::fs::File>,
}

fn sink() -> Option<&'static Sink> {
    static S: OnceLock<Option<Sink>> = OnceLock::new();
    S.get_or_init(|| {
        let p = std::env::var_os("RMR_ZIP_TRACE")?;
        let mut p = std::path::PathBuf::from(p).into_os_string();
        p.push(format!(".{}", std::process::id()));
        let f = std::fs::OpenOptions::new().create(true).append(true).open(p).ok()?;
        Some(Sink { t0: Instant::now(), file: Mutex::new(f) })
    })
    .as_ref()
}

/// Appends one line (built only when tracing is on).
pub(crate) fn line(f: impl FnOnce() -> String) {
    if let Some(s) = sink() {
        let t = s.t0.elapsed().as_micros();
        let th = std::thread::current();
        let l = format!("{t:>10} {:<16} {}\n", th.name().unwrap_or("?"), f());
        let _ = s.file.lock().unwrap_or_else(|e| e.into_inner()).write_all(l.as_bytes());
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
