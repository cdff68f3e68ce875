#!/usr/bin/env bash
# Instructions per small-message round trip, counted, not timed: the lab
# latency test's pattern (benches/examples/rtcost.rs: each side posts a
# receive, a suppressed 8-byte write and a suppressed send per round trip)
# between two endpoints over loopback, run under valgrind's callgrind for a
# plain tcp endpoint and for multirail endpoints. Two runs of each (LO and
# HI round trips) cancel the set-up: per round trip = the difference over
# HI - LO, both ends together. Counted: the two application threads (their
# posts, and their waits, which drive the sockets themselves), not the
# endpoints' helper threads, whose timer naps come ~50 times as often per
# round trip under valgrind's slowdown as in real time. Waiters block
# instead of spinning (RMR_EVD_SPIN_US=0), so the count is the work a round
# trip takes, not how long someone spun: repeated runs agree within 1%. The
# shm row is the same pattern between two shm IAs of one process (rings;
# no system call on the data path, so it counts all the work); the ofi
# row counts libfabric's own user-space code with rmr's. A
# count does not swing with the host the way the latency rows do, so it
# tells what the multirail layer itself adds to a small message. Writes
# JSON lines to OUT.
#   scripts/rt-instructions.sh [OUT]     (default bench-out/rt-instructions.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/rt-instructions.jsonl}
mkdir -p "$(dirname "$OUT")"
command -v valgrind >/dev/null || apt-get install -y -q valgrind >/dev/null
# rustix's raw-syscall backend finds the vDSO in a way valgrind does not
# support: this build uses its libc backend, in a target directory of its own.
CARGO_TARGET_DIR=target/valgrind RUSTFLAGS="--cfg rustix_use_libc" \
  cargo build --release -q -p rmr-bench --example rtcost
X=target/valgrind/release/examples/rtcost
LO=${LO:-1000}
HI=${HI:-3000}
count() { # spec round-trips -> instructions
  RMR_EVD_SPIN_US=0 valgrind --tool=callgrind --toggle-collect='rmr_api::provider::conformance::write_send_ping_pong*' \
    --callgrind-out-file=/dev/null "$X" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
: >"$OUT"
for spec in \
  "tcp:127.0.0.1" \
  "multirail:tcp:127.0.0.1;engine=pinned" \
  "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=pinned" \
  "multirail:tcp:127.0.0.1,tcp:127.0.0.2;engine=inline" \
  "shm:rtcost" \
  "ofi:tcp:127.0.0.1"; do
  lo=$(count "$spec" "$LO")
  hi=$(count "$spec" "$HI")
  # A count of 0 means the collected function was not found (renamed?).
  if [ -z "$lo" ] || [ -z "$hi" ] || [ "$lo" = 0 ] || [ "$hi" = 0 ]; then
    echo "rt-instructions: no count for $spec" >&2
    exit 1
  fi
  echo "{\"spec\":\"$spec\",\"round_trips\":[$LO,$HI],\"instructions\":[$lo,$hi],\"per_round_trip\":$(((hi - lo) / (HI - LO)))}" |
    tee -a "$OUT"
done
