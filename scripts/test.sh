#!/usr/bin/env bash
# The test job: set up, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace --release 2>&1
