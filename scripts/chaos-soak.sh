#!/usr/bin/env bash
# The chaos soak campaign: a multirail endpoint over three shaped lab rails
# carrying checked rounds while rails are cut, healed and reshaped at random
# (multirail/tests/chaos.rs; CI runs it for 60 s). Needs root (network
# namespaces); removes its lab when done.
#   scripts/chaos-soak.sh [SECONDS]     (default 600)
set -euo pipefail
cd "$(dirname "$0")/.."
export RMR_TEST_CHAOS_SECS=${1:-600}
# A lab of its own, so that it may run beside CI's 60 s run.
export RMR_TEST_CHAOS_PREFIX=${RMR_TEST_CHAOS_PREFIX:-rmrcx}
cargo test --release -q -p multirail --test chaos -- --nocapture 2>&1 | grep -E 'RESULT|chaos|LIVE (broken|rail|server|error|end)|test result|panicked'
