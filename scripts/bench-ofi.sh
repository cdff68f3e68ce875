#!/usr/bin/env bash
# The libfabric backend beside libfabric itself on loopback, as a new user
# would first measure it: rmr's ofi:tcp 8 B and 4 KiB write+notify half
# round trip beside `fi_pingpong -p tcp -e msg` (and `-p sockets`) and
# beside rmr's tcp backend, ROUNDS interleaved rounds, client on CPU 0 and
# server on CPU 1. fi_pingpong prints a mean per run, so rmr's mean is the
# figure compared (`lat_mean_us`). Then the ofi barrier rows (send/recv and
# RDMA, 8/12/16 processes) beside the tcp backend's send/recv barrier at 8.
# (The same comparison on a shaped 1 Gbit/s rail is scripts/bench-lab.sh's
# ofi section.) Writes JSON lines to OUT (default bench-out/ofi-loopback.jsonl)
# and BAR (default bench-out/barrier-ofi.jsonl). Each round also runs
# benches/c/fi_wpp.c: what a write+notify costs in plain libfabric, as two
# operations (what the backend posted before small writes rode in its
# messages) and as one RMA write with remote CQ
# data (a design's floor), beside a send ping-pong, in the same process.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/ofi-loopback.jsonl}; BAR=${2:-bench-out/barrier-ofi.jsonl}
mkdir -p "$(dirname "$OUT")" "$(dirname "$BAR")"; : > "$OUT"; : > "$BAR"
command -v fi_pingpong >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric-bin >/dev/null; }
cargo build --release -q -p rmr-bench
B=$PWD/target/release/rmr-bench
CBIN=
trap 'rm -rf "${CBIN:-/nonexistent}"; pkill -f "fi_wpp server" 2>/dev/null || true; pkill -f "rmr-bench server --backend ofi:tcp --rails 127.0.0.1 --port 7580" 2>/dev/null || true; pkill -f "rmr-bench server --rails 127.0.0.1 --port 7581" 2>/dev/null || true; pkill -f "fi_pingpong -p" 2>/dev/null || true' EXIT
taskset -c 1 "$B" server --backend ofi:tcp --rails 127.0.0.1 --port 7580 --idle 600 >/dev/null 2>&1 &
taskset -c 1 "$B" server --rails 127.0.0.1 --port 7581 --idle 600 >/dev/null 2>&1 &
sleep 0.5
CBIN=$(mktemp -d /tmp/rmr-ofi-c.XXXXXX)
cc -O2 -o "$CBIN/fi_wpp" benches/c/fi_wpp.c -lfabric
# `--sizes 0`: the ping-pong without an RDMA write, each way one send of
# rmr-bench's 16-byte control message: like with like for fi_pingpong -S 16.
lat() { taskset -c 0 "$B" client --json --test lat --sizes 0,8,4K --iters 3000 --rails 127.0.0.1 "$@" 2>/dev/null | grep -v '"test":"meta"' | sed 's/}$/,"link":"loopback"}/'; }
fipp() { # provider size
  local prov=$1 size=$2 it=3000
  [ "$prov" = sockets ] && it=300
  taskset -c 1 fi_pingpong -p "$prov" -e msg -I "$it" -S "$size" -B 9238 >/dev/null 2>&1 &
  sleep 0.3
  taskset -c 0 fi_pingpong -p "$prov" -e msg -I "$it" -S "$size" -P 9238 127.0.0.1 2>/dev/null \
    | awk -v p="$prov" -v s="$size" '/usec\/xfer/ { h = 1; next } h && NF >= 7 { h = 0; printf "{\"test\": \"fi_pingpong\", \"backend\": \"fi_pingpong:%s\", \"rails\": 1, \"size\": %d, \"lat_mean_us\": %s, \"link\": \"loopback\"}\n", p, s, $7 }'
  wait "$!" 2>/dev/null || true
}
# benches/c/fi_wpp.c's three 8 B ping-pongs (send; write + 24 B send; the
# two as one RMA write with remote CQ data), 10 blocks of each in turn.
fiwpp() {
  taskset -c 1 "$CBIN/fi_wpp" server tcp 9239 >/dev/null 2>&1 &
  sleep 0.3
  # A failed run (its check, a connection) loses its rows, not the round.
  { taskset -c 0 "$CBIN/fi_wpp" client tcp 127.0.0.1 9239 10000 10 || echo "fi_wpp failed" >&2; } | sed 's/}$/, "link": "loopback"}/'
  wait "$!" 2>/dev/null || true
}
for round in $(seq "${ROUNDS:-5}"); do
  lat --backend ofi:tcp --port 7580
  lat --port 7581
  for size in 8 4096; do fipp tcp $size; fipp sockets $size; done
  fipp tcp 16
  fiwpp
done | tee "$OUT"
for n in 8 12 16; do
  "$B" barrier --procs "$n" --backend ofi:tcp --shm off --iters 600 --json | tee -a "$BAR"
done
"$B" barrier --procs 8 --backend tcp --shm off --algo sendrecv --iters 600 --json \
  | sed 's/"test":"barrier"/"test":"barrier","reference":true/' | tee -a "$BAR"
echo "wrote $OUT and $BAR"
