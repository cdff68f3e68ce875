#!/usr/bin/env bash
# A new user's first five minutes, checked: a fresh crate outside the
# workspace whose only dependency is `rmr` (by path), with the README's
# first program as src/main.rs, builds and runs (a write + notify between
# two threads, no register() call). Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$(mktemp -d /tmp/rmr-fresh.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
mkdir -p "$DIR/src"
cat > "$DIR/Cargo.toml" <<TOML
[package]
name = "my-first-rmr"
version = "0.1.0"
edition = "2024"

[dependencies]
rmr = { path = "$ROOT/rmr" }
TOML
# The program exactly as the README shows it (the README holds it verbatim).
cp rmr/examples/first.rs "$DIR/src/main.rs"
# A target dir of its own under the workspace's, kept between runs.
out=$(CARGO_TARGET_DIR="$ROOT/target/fresh-crate" cargo run -q --manifest-path "$DIR/Cargo.toml")
echo "$out"
grep -q "server received: hello over rmr" <<<"$out"
echo "fresh crate: ok"
