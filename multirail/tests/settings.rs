//! Settings from the environment are checked at `open`: a value that does
//! not parse (`RMR_MR_THRESHOLD=12Q`, `RMR_TCP_BATCH=maybe`) is an error
//! naming the variable and the value, never a silent default; good values
//! take effect. Each case runs in a child process with its own
//! environment.

use std::process::Command;

const ROLE: &str = "RMR_TEST_SETTINGS_CHILD";

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
    // Spec options are checked the same way, and win over the variables.
    let r = run(&format!("{mr};threshold=12Q"), &[]);
    assert!(r.contains("BadSetting") && r.contains("threshold") && r.contains("12Q"), "{r}");
    let r = run(&format!("{mr};engine=inline"), &[("RMR_MR_ENGINE", "fork-join")]);
    assert_eq!(r, "OPENED multirail");
    let r = run("tcp:127.0.0.1;batch=maybe", &[]);
    assert!(r.contains("BadSetting") && r.contains("batch") && r.contains("0 or 1"), "{r}");
    let r = run("tcp:127.0.0.1;colour=red", &[]);
    assert!(r.contains("BadSpec") && r.contains("colour") && r.contains("stall_timeout_ms"), "{r}");
    let r = run("tcp:127.0.0.1;max_dtos=0", &[]);
    assert!(r.contains("BadSetting") && r.contains("max_dtos"), "{r}");
    assert_eq!(run("tcp:127.0.0.1;batch=0;stall_timeout_ms=5000", &[]), "OPENED tcp");
}

/// What `info` lists: each value with its source.
#[test]
fn settings_name_their_sources() {
    use rmr_api::settings::{Given, Source};
    let (_, g) =
        Given::split("multirail", "tcp:127.0.0.1;engine=inline", &multirail::KNOBS).unwrap();
    let s = multirail::MrConfig::settings(&g).unwrap();
    let engine = s.iter().find(|x| x.name == "RMR_MR_ENGINE").unwrap();
    assert_eq!((engine.value.as_str(), engine.source), ("inline", Source::Spec));
    let (_, g) = Given::split("tcp", "127.0.0.1;sockbuf=1M", &backend_tcp::KNOBS).unwrap();
    assert_eq!(backend_tcp::TcpConfig::from_given(&g).unwrap().sockbuf, Some(1 << 20));
    let (_, g) = Given::split("tcp", "127.0.0.1;sockbuf=lots", &backend_tcp::KNOBS).unwrap();
    let e = backend_tcp::TcpConfig::from_given(&g).unwrap_err();
    assert!(matches!(e, rmr_api::Error::BadSetting { .. }), "{e}");
}

/// Configs built in code are checked the same way.
#[test]
fn builders_check_their_values() {
    use multirail::{Engine, MrConfig};
    let c = MrConfig::builder().engine(Engine::Inline).threshold(8 << 10).build().unwrap();
    assert_eq!((c.engine, c.threshold), (Engine::Inline, 8 << 10));
    assert!(MrConfig::builder().align(0).build().is_err());
    let t = backend_tcp::TcpConfig::builder().batch(false).build().unwrap();
    assert!(!t.batch);
    assert!(backend_tcp::TcpConfig::builder().max_recvs(0).build().is_err());
}
