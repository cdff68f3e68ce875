//! `RMR_OFI_*` settings are checked at `open`: a value that does not parse
//! is an error naming the variable, not a silent default (each case in a
//! child process with its own environment).

use std::process::Command;

const ROLE: &str = "RMR_TEST_OFI_SETTINGS_CHILD";

fn run(env: &[(&str, &str)]) -> String {
    run_spec("ofi:tcp:127.0.0.1", env)
}

fn run_spec(spec: &str, env: &[(&str, &str)]) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["a_bad_ofi_setting_fails_open", "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, spec);
    for (k, v) in env {
        c.env(k, v);
    }
    let text = String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned();
    match text.split("RESULT ").nth(1) {
        Some(r) => r.lines().next().unwrap_or("").to_string(),
        None => text,
    }
}

#[test]
fn a_bad_ofi_setting_fails_open() {
    if let Ok(spec) = std::env::var(ROLE) {
        backend_ofi::register();
        match rmr_api::open(&spec) {
            Ok(_) => println!("RESULT OPENED"),
            Err(e) => println!("RESULT ERROR {e}"),
        }
        return;
    }
    let r = run(&[("RMR_OFI_CQ_SIZE", "lots")]);
    assert!(r.starts_with("ERROR") && r.contains("RMR_OFI_CQ_SIZE") && r.contains("lots"), "{r}");
    let r = run(&[("RMR_OFI_PROGRESS_THREAD", "sometimes")]);
    assert!(r.contains("RMR_OFI_PROGRESS_THREAD") && r.contains("0 or 1"), "{r}");
    assert_eq!(run(&[("RMR_OFI_CQ_SIZE", "8192")]), "OPENED");
    // Spec options: checked the same way, and over the variables.
    let r = run_spec("ofi:tcp:127.0.0.1;cq_size=8", &[]);
    assert!(r.starts_with("ERROR") && r.contains("cq_size") && r.contains("16 to"), "{r}");
    assert_eq!(run_spec("ofi:tcp:127.0.0.1;cq_size=4096", &[("RMR_OFI_CQ_SIZE", "9")]), "OPENED");
}

/// A config built in code is checked, and opens.
#[test]
fn a_built_config_opens() {
    use backend_ofi::{OfiConfig, OfiIa};
    assert!(OfiConfig::builder().cq_size(1).build().is_err());
    let cfg = OfiConfig::builder().cq_size(1024).delivery_complete(false).build().unwrap();
    let ia = OfiIa::with_config("tcp:127.0.0.1", cfg).unwrap();
    assert_eq!(ia.fi_provider(), "tcp");
}
