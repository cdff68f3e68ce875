#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (libFuzzer, AddressSanitizer).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# FUZZ_PROFILE=dev builds the targets unoptimised (debug assertions and
# overflow checks on; about 3 minutes from scratch instead of 4.5-5 on 2
# cores, at fewer inputs a second): the CI smoke pass uses it. Default:
# release (-O), for campaigns.
#
# SECONDS_PER_TARGET defaults to $FUZZ_SECS or 60. Targets default to all of
# them (fuzz/fuzz_targets/*.rs). Each target starts from its kept regression
# inputs (<crate>/fuzz-regressions/<target>: backend-tcp, multirail,
# backend-shm for shm_*, backend-verbs for verbs_*, or zipper-bridge for zb_* and world_file) plus its corpus from earlier runs
# (fuzz/corpus/<target>, not committed). A crash or hang is copied into the
# regression folder of its target, where the plain `cargo test` replay picks
# it up, and the script exits non-zero. Prints one line of figures per target
# (runs, coverage).
#
# Toolchain: cargo-fuzz needs unstable rustc flags (-Zsanitizer). With no
# nightly toolchain installed, the stable one is used with RUSTC_BOOTSTRAP=1
# (set FUZZ_TOOLCHAIN=nightly to use a nightly instead).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-${FUZZ_SECS:-60}}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
TC=()
if [ -n "${FUZZ_TOOLCHAIN:-}" ]; then TC=("+$FUZZ_TOOLCHAIN"); else export RUSTC_BOOTSTRAP=1; fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
regdir() {
  case "$1" in
    mr_*) echo "multirail/fuzz-regressions/$1";;
    verbs_*) echo "backend-verbs/fuzz-regressions/$1";;
    shm_*) echo "backend-shm/fuzz-regressions/$1";;
    zb_*|world_file) echo "zipper-bridge/fuzz-regressions/$1";;
    *) echo "backend-tcp/fuzz-regressions/$1";;
  esac
}
if [ "${FUZZ_PROFILE:-release}" = dev ]; then PROF=--dev; else PROF=-O; fi
cd fuzz
if [ $# -eq 0 ]; then
  nice -n 10 cargo "${TC[@]}" fuzz build $PROF
else
  for t in "${targets[@]}"; do nice -n 10 cargo "${TC[@]}" fuzz build $PROF "$t"; done
fi
failed=0
for t in "${targets[@]}"; do
  reg="../$(regdir "$t")"; mkdir -p "corpus/$t" "artifacts/$t" "$reg"
  log="artifacts/$t/run.log"
  set +e
  nice -n 10 cargo "${TC[@]}" fuzz run $PROF "$t" "corpus/$t" "$reg" -- \
    -max_total_time="$SECS" -timeout=30 -max_len=4096 -rss_limit_mb=4096 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
  echo "fuzz $t: ${runs:-?} inputs in ${SECS}s, coverage ${cov:-?} edges, exit $rc"
  if [ $rc -ne 0 ]; then
    failed=1
    grep -E 'panicked|ERROR|SUMMARY|HANG|WRITE OUTSIDE' "$log" | head -20 || true
    for a in artifacts/"$t"/crash-* artifacts/"$t"/timeout-* artifacts/"$t"/oom-* artifacts/"$t"/leak-*; do
      [ -f "$a" ] && cp "$a" "$reg/" && echo "kept $a as $reg/$(basename "$a") (a regression input)"
    done
  fi
done
exit $failed
