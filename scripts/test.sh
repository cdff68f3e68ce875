#!/usr/bin/env bash
# The test job: set up, check formatting and lints, a short fuzz pass, run
# every test (hostile peers, lab fault campaign and the short soak included).
#   FUZZ_SECS   seconds per fuzz target (default 10; 0 skips the fuzz pass)
#   RMR_TEST_SOAK_SECS  length of the short soak test (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says when it starts (seconds since the job began): the whole job
# must stay under 20 minutes on 2 cores, and this tells where the time goes.
step() { echo "== test.sh: $* (at ${SECONDS}s)"; }
step setup
scripts/setup.sh
step fmt
cargo fmt --all -- --check
# The layout: modules inside these crates depend on each other one way only
# (an order to read them in), and no source file of any crate runs
# past 800 lines (one concern per file).
step layout
python3 scripts/module-dag.py rmr-api multirail backend-tcp backend-shm rmr-coll rmr-boot benches examples rmr-dsm
scripts/file-lengths.sh 800 rmr-api multirail backend-tcp backend-shm rmr-dsm zipper-bridge backend-verbs backend-ofi benches rmr-coll rmr-boot rmr examples
# The C programs the benchmark scripts build (baselines and floors, benches/c)
# still compile without a warning; the MPI ones need Open MPI's headers,
# which the benchmark scripts install.
step benchmark programs
for f in benches/c/*.c; do
  case $f in */mpi_*) continue;; esac
  cc -fsyntax-only -Wall -Wextra -Werror "$f"
done
# Library crates report through `tracing`, never straight to stderr.
if grep -rn 'eprintln!' --include='*.rs' --exclude-dir=bin rmr-api/src backend-tcp/src backend-shm/src \
    backend-ofi/src backend-verbs/src multirail/src zipper-bridge/src rmr-boot/src rmr-coll/src \
    rmr-dsm/src rmr/src; then
  echo "eprintln! in library code (use tracing)"; exit 1
fi
# `pmix`: the PMIx bootstrap (rmr-boot) and the barrier's mpirun tests (rmr-coll).
step clippy
cargo clippy --workspace --all-targets -q --features rmr-coll/pmix,rmr/tokio,rmr/ofi,rmr/shm -- -D warnings
# `stages`: the round-trip timeline for latency work (rmr_api::stages), off by default.
step clippy and test with stages
cargo clippy -p rmr-api --all-targets -q --features stages -- -D warnings
cargo test -p rmr-api --release -q --features stages --lib stages
# A short fuzz pass over every parser a peer can reach (FUZZ_SECS per target; 0 skips).
FUZZ_SECS=${FUZZ_SECS:-10}
if [ "$FUZZ_SECS" != 0 ]; then
  step fuzz
  # Unoptimised targets (debug assertions on): builds in ~3 min instead of ~5.
  FUZZ_PROFILE=${FUZZ_PROFILE:-dev} scripts/fuzz.sh "$FUZZ_SECS"
fi
# Every public item documented, every intra-doc link resolving (all backends' docs).
step docs
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace -q --features rmr-coll/pmix,rmr/ofi,rmr/verbs,rmr/zipper,rmr/tokio,rmr/shm
# Miri over the pure modules (memory's raw-pointer accessors, planner, codec),
# ThreadSanitizer over the tcp and multirail conformance suites.
step sanitizers
scripts/sanitize.sh
# A fresh crate depending only on rmr runs the README's first program.
step fresh crate
scripts/fresh-crate.sh
step tests
cargo test --workspace --release --features rmr-coll/pmix,rmr/tokio,rmr/ofi,rmr/shm 2>&1
step done
