//! Bad world files: `rmr-bridge --world` refuses each with a message that
//! names the file and the line, and exits non-zero.

use std::process::Command;

const HEAD: &str = "[[cluster]]\nname = \"A\"\n[[cluster]]\nname = \"B\"\n";

fn run(name: &str, text: &str) -> (i32, String) {
    let path = std::env::temp_dir().join(format!("zipper-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rmr-bridge"))
        .args(["--world", path.to_str().unwrap()])
        .output()
        .expect("run rmr-bridge");
    let _ = std::fs::remove_file(&path);
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn bad_world_files_are_refused_naming_the_line() {
    let proc0 = "[[process]]\nrank = 0\ncluster = \"A\"\naddrs = [\"198.18.10.1\"]\nport = 7800\n";
    let cases = [
        ("dup", format!("{HEAD}{proc0}{proc0}"), ":10: duplicate rank 0 (first at line 5)"),
        (
            "half",
            format!("{HEAD}[[bridge]]\na = \"198.18.10.2\"\nport = 7700\n"),
            ":5: bridge has no address in cluster `B`",
        ),
        (
            "unknown",
            format!("{HEAD}{}", proc0.replace("\"A\"", "\"Q\"")),
            ":5: rank 0 names unknown cluster `Q`",
        ),
        ("syntax", format!("{HEAD}[[bridge]\n"), ":5:"),
        (
            "three",
            format!("{HEAD}[[cluster]]\nname = \"C\"\n"),
            ":5: a world has exactly two clusters",
        ),
    ];
    for (name, text, want) in cases {
        let (code, err) = run(name, &text);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(want), "{name}: expected `{want}` in: {err}");
        assert!(err.contains(&format!("zipper-{name}-")), "{name}: file named: {err}");
    }
    // A good file with no bridge 3 is refused too, but for that reason.
    let (code, err) = run("nobridge", &format!("{HEAD}{proc0}"));
    assert_eq!(code, 2);
    assert!(err.contains("has no bridge 0"), "{err}");
}
