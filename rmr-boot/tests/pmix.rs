//! The PMIx bootstrap under a real launcher: this test binary runs itself
//! under Open MPI's `mpirun` (Debian's openmpi-bin, installed by
//! scripts/setup.sh) and each rank checks what PMIx told it.

use std::process::Command;

#[cfg_attr(not(feature = "pmix"), allow(dead_code))]
/// What `mpirun` needs here: root in a container needs
/// `--allow-run-as-root`; more ranks than cores need `--oversubscribe`.
fn mpirun() -> Option<Command> {
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("SKIPPED: mpirun not installed (scripts/setup.sh installs openmpi-bin)");
        return None;
    }
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe"]);
    Some(c)
}

#[test]
#[cfg(feature = "pmix")]
fn pmix_job_of_three() {
    let Some(mut c) = mpirun() else { return };
    let exe = std::env::current_exe().unwrap();
    let out = c
        .args(["-np", "3", "-x", "RMR_TEST_BOOT_ROLE=rank"])
        .arg(exe)
        .args(["pmix_rank", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .output()
        .expect("run mpirun");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mpirun failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..3 {
        assert!(text.contains(&format!("RANK {r}/3 OK")), "rank {r} did not report:\n{text}");
    }
}

#[test]
#[cfg(not(feature = "pmix"))]
fn pmix_job_of_three() {
    println!("SKIPPED: built without the `pmix` feature (scripts/test.sh enables it)");
    let e = rmr_boot::Bootstrap::pmix().unwrap_err();
    assert!(matches!(e, rmr_boot::Error::Unavailable { kind: "pmix", .. }), "{e}");
}

/// One rank of `pmix_job_of_three` (run by mpirun only).
#[test]
#[ignore = "worker, not a test: one rank that pmix_job_of_three starts under mpirun (RMR_TEST_BOOT_ROLE=rank)"]
fn pmix_rank() {
    assert_eq!(std::env::var("RMR_TEST_BOOT_ROLE").as_deref(), Ok("rank"), "run by mpirun");
    let b = rmr_boot::Bootstrap::from_env().expect("bootstrap");
    assert_eq!(b.kind(), rmr_boot::Kind::Pmix, "{}", b.describe());
    assert_eq!(b.size(), 3);
    assert_eq!(b.local_size(), 3, "one node");
    assert_eq!(b.local_rank(), b.rank(), "mpirun numbers local ranks in rank order");
    let all = b.allgather(format!("addr-{}", b.rank()).as_bytes()).unwrap();
    let want: Vec<Vec<u8>> = (0..3).map(|r| format!("addr-{r}").into_bytes()).collect();
    assert_eq!(all, want);
    // A second, empty exchange must not see the first one's data.
    assert!(b.allgather(&[]).unwrap().iter().all(|d| d.is_empty()));
    b.barrier().unwrap();
    println!("RANK {}/{} OK ({})", b.rank(), b.size(), b.describe());
}
