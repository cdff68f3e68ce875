//! The lab of the multirail lab tests (`lab.rs`, `chaos.rs`): network
//! namespaces joined by shaped veth rails (scripts/lab.sh), this test
//! binary run as a role inside one, and their results read back.
#![allow(dead_code)] // each test binary uses some of these

use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) const ROLE: &str = "RMR_TEST_LAB_ROLE";
/// The lab tests share the CPU: run them one at a time.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

pub(crate) fn lab_script() -> String {
    format!("{}/../scripts/lab.sh", env!("CARGO_MANIFEST_DIR"))
}

/// A lab that removes itself when dropped.
pub(crate) struct Lab(pub(crate) &'static str);

impl Lab {
    pub(crate) fn pair(prefix: &'static str, rates: &str) -> Option<Lab> {
        if !is_root() {
            println!("SKIPPED: lab tests need root for network namespaces");
            return None;
        }
        let out = Command::new("bash")
            .args([&lab_script(), "pair", prefix, rates])
            .output()
            .expect("run lab.sh");
        assert!(
            out.status.success(),
            "lab.sh pair failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Lab(prefix))
    }

    pub(crate) fn ns(&self, side: char) -> String {
        format!("{}-{side}", self.0)
    }

    pub(crate) fn tx_bytes(&self, rail: usize) -> u64 {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns('a'),
                "cat",
                &format!("/sys/class/net/{}a{rail}/statistics/tx_bytes", self.0),
            ])
            .output()
            .expect("read counters");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
    }

    pub(crate) fn cut(&self, rail: usize) {
        self.link("cut", rail);
    }

    pub(crate) fn heal(&self, rail: usize) {
        self.link("heal", rail);
    }

    pub(crate) fn link(&self, what: &str, rail: usize) {
        let st = Command::new("bash")
            .args([&lab_script(), what, self.0, &rail.to_string()])
            .status()
            .expect("lab.sh");
        assert!(st.success(), "lab.sh {what} failed");
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new("bash").args([&lab_script(), "down", self.0]).status();
    }
}

pub(crate) fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

/// Runs this test binary's test `name` inside namespace `ns` with a role.
pub(crate) fn spawn_role(
    ns: &str,
    name: &str,
    role: &str,
    env: &[(&str, String)],
) -> std::process::Child {
    let exe = std::env::current_exe().expect("test binary");
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(exe).args([
        name,
        "--exact",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    c.env(ROLE, role)
        .env("RMR_TCP_USER_TIMEOUT_MS", "1500")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn role")
}

pub(crate) fn finish(child: std::process::Child, what: &str) -> String {
    let out: Output = child.wait_with_output().expect("wait");
    let s = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{what} failed:\n{s}\n{}", String::from_utf8_lossy(&out.stderr));
    s
}

pub(crate) fn result<'a>(out: &'a str, key: &str) -> &'a str {
    let pat = format!("RESULT {key}=");
    out.lines()
        .find_map(|l| l.find(&pat).map(|i| l[i + pat.len()..].trim_end()))
        .unwrap_or_else(|| panic!("no RESULT {key} in:\n{out}"))
}

pub(crate) use rmr_api::provider::conformance::{checksum, pattern};

impl Lab {
    /// Reshapes rail `rail` (both ends) to `rate` (tc syntax).
    pub(crate) fn rate(&self, rail: usize, rate: &str) {
        let st = Command::new("bash")
            .args([&lab_script(), "rate", self.0, &rail.to_string(), rate])
            .status()
            .expect("lab.sh");
        assert!(st.success(), "lab.sh rate failed");
    }
}

/// Lines of a child's output as they come (echoed), and the child back
/// for `finish`-style waiting.
pub(crate) fn stream_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            println!("  client: {l}");
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

pub(crate) fn wait_line(
    rx: &std::sync::mpsc::Receiver<String>,
    pat: &str,
    within: Duration,
) -> String {
    let end = Instant::now() + within;
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(l) if l.contains(pat) => return l,
            Ok(_) => {}
            Err(_) => panic!("no `{pat}` from the client within {within:?}"),
        }
    }
}

/// Connects `ep` to the server's rails at `addrs`, retrying for 10 s while
/// the server is not listening yet; the server's private data.
pub(crate) fn connect_retry(ep: &dyn rmr_api::Ep, addrs: &str, service: u16) -> Vec<u8> {
    let start = Instant::now();
    loop {
        match ep.connect(addrs, service, b"", Duration::from_secs(5)) {
            Ok(pd) => return pd,
            Err(e) if start.elapsed() < Duration::from_secs(10) => {
                println!("retrying connect: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}
