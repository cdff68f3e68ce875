#!/usr/bin/env bash
# The test job: set up, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
# `pmix`: the PMIx bootstrap (rmr-boot) and the barrier's mpirun tests (rmr-coll).
cargo clippy --workspace --all-targets -q --features rmr-coll/pmix -- -D warnings
cargo test --workspace --release --features rmr-coll/pmix 2>&1
