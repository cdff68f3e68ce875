#!/usr/bin/env bash
# The main job: set up, build, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo run --release -q -p rmr-bench -- demo "$@"
