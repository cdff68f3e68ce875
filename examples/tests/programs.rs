//! The example programs run as a user runs them: server and client as two
//! processes (the client may start first: it retries until the server
//! listens), each ending on its own once the exchange is done (no sleeps).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `target/<profile>/examples/<name>`, built by `cargo test` beside this test.
fn example(name: &str) -> PathBuf {
    let me = std::env::current_exe().expect("test binary path");
    me.parent().and_then(|d| d.parent()).expect("target dir").join("examples").join(name)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn two_processes(name: &str, client_says: &str) {
    let port = free_port().to_string();
    // The client first: it must wait for the server by itself.
    let client = Command::new(example(name))
        .args(["client", "tcp:127.0.0.1", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start client");
    let server = Command::new(example(name))
        .args(["server", "tcp:127.0.0.1", &port])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start server");
    let c = client.wait_with_output().unwrap();
    let s = server.wait_with_output().unwrap();
    let (c_out, s_out) = (String::from_utf8_lossy(&c.stdout), String::from_utf8_lossy(&s.stdout));
    assert!(c.status.success() && s.status.success(), "client: {c_out}\nserver: {s_out}");
    assert!(c_out.contains(client_says), "client said: {c_out}");
}

#[test]
fn rdma_write_between_two_processes() {
    two_processes("rdma_write", "RDMA writes verified");
}

#[test]
fn pingpong_between_two_processes() {
    two_processes("pingpong", "65536 B  half round trip");
}
