#!/usr/bin/env bash
# The live-bridge fuzz campaign: a real bridge between two loopback
# networks, with proxies that mutate the tcp frames flowing into it from
# the client and from the target (zipper-bridge/tests/live_fuzz.rs).
# CI runs the same test for 15 s; this runs it for SECONDS (default 1200).
# Prints the seed (RMR_TEST_BRIDGE_FUZZ_SEED=<seed> replays a run's
# choices) and the tally: sessions, how they ended, mutations by kind.
#   scripts/fuzz-bridge.sh [SECONDS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export RMR_TEST_BRIDGE_FUZZ_SECS=${1:-1200}
[ -n "${2:-}" ] && export RMR_TEST_BRIDGE_FUZZ_SEED=$2
cargo test --release -q -p zipper-bridge --test live_fuzz -- --nocapture 2>&1 | grep -v '^$'
