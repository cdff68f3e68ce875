//! `RMR_OFI_*` settings are checked at `open`: a value that does not parse
//! is an error naming the variable, not a silent default (each case in a
//! child process with its own environment).

use std::process::Command;

const ROLE: &str = "RMR_OFI_SETTINGS_CHILD";

fn run(env: &[(&str, &str)]) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["a_bad_ofi_setting_fails_open", "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, "1");
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
    if std::env::var_os(ROLE).is_some() {
        backend_ofi::register();
        match rmr_api::open("ofi:tcp:127.0.0.1") {
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
}
