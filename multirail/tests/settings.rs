//! Settings from the environment are checked at `open`: a value that does
//! not parse (`RMR_MR_THRESHOLD=12Q`, `RMR_TCP_BATCH=maybe`) is an error
//! naming the variable and the value, never a silent default; good values
//! take effect. Each case runs in a child process with its own
//! environment.

use std::process::Command;

const ROLE: &str = "RMR_SETTINGS_CHILD";

fn child(spec: &str) -> String {
    multirail::register();
    backend_tcp::register();
    match rmr_api::open(spec) {
        Ok(ia) => format!("OPENED {}", ia.attr().provider),
        Err(e) => format!("ERROR {e} :: {e:?}"),
    }
}

fn run(spec: &str, env: &[(&str, &str)]) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["settings_are_checked_at_open", "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, spec);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match text.split("RESULT ").nth(1) {
        Some(r) => r.lines().next().unwrap_or("").to_string(),
        None => text,
    }
}

#[test]
fn settings_are_checked_at_open() {
    if let Ok(spec) = std::env::var(ROLE) {
        println!("RESULT {}", child(&spec));
        return;
    }
    let mr = "multirail:tcp:127.0.0.1,tcp:127.0.0.2";
    let r = run(mr, &[("RMR_MR_THRESHOLD", "12Q")]);
    assert!(r.starts_with("ERROR") && r.contains("RMR_MR_THRESHOLD") && r.contains("12Q"), "{r}");
    assert!(r.contains("BadSetting"), "{r}");
    let r = run(mr, &[("RMR_MR_ENGINE", "turbo")]);
    assert!(r.contains("RMR_MR_ENGINE") && r.contains("pinned"), "names what is accepted: {r}");
    let r = run("tcp:127.0.0.1", &[("RMR_TCP_BATCH", "maybe")]);
    assert!(r.starts_with("ERROR") && r.contains("RMR_TCP_BATCH") && r.contains("0 or 1"), "{r}");
    let r = run("tcp:127.0.0.1", &[("RMR_TCP_STALL_TIMEOUT_MS", "ten")]);
    assert!(r.contains("RMR_TCP_STALL_TIMEOUT_MS"), "{r}");
    // Good values open.
    let r = run(
        mr,
        &[("RMR_MR_THRESHOLD", "64K"), ("RMR_MR_ENGINE", "inline"), ("RMR_TCP_BATCH", "0")],
    );
    assert_eq!(r, "OPENED multirail");
    // And take effect (what `info` lists).
    let s = multirail::MrConfig::settings().unwrap();
    assert!(s.iter().any(|x| x.name == "RMR_MR_THRESHOLD"));
}
