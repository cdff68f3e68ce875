#!/usr/bin/env bash
# The dsm example (Jacobi heat in rmr shared memory) as two processes on two
# hosts of the lab joined by two shaped rails, each process on a 2-rail
# multirail EP. Prints rank 0's result line (bit_identical=true expected).
#
# Each host is a network namespace with a node name of its own (RMR_NODE:
# host-a, host-b), so the two processes reach each other only over the
# rails (processes of one node would use shared memory and the node's
# barrier stage), and one CPU of its own (taskset: host a CPU 0, host b
# CPU 1), as two single-CPU hosts: a process, its rails' threads and its
# transport's helpers share their host's CPU, never the other host's.
# Compare with one single-threaded process on one CPU
# (`taskset -c 0 dsm --sweep 1`, as scripts/bench-dsm.sh does).
# DSM_BIN runs another build of the example (an old one, to compare)
# instead of building this checkout's.
#   scripts/dsm-lab.sh [RATES] [dsm args...]     e.g. scripts/dsm-lab.sh 1gbit,1gbit --iters 100
set -euo pipefail
# A relative DSM_BIN is the caller's, resolved before the cd; it must exist.
D=
if [ -n "${DSM_BIN:-}" ]; then D=$(realpath -e "$DSM_BIN"); fi
cd "$(dirname "$0")/.."
RATES=${1:-1gbit,1gbit}; shift || true
P=rmrdsm
trap 'scripts/lab.sh down $P' EXIT
if [ -z "$D" ]; then
  cargo build --release -q -p rmr-examples --example dsm
  D=$PWD/target/release/examples/dsm
fi
scripts/lab.sh pair $P "$RATES" >/dev/null
common=(RMR_SIZE=2 RMR_ROOT=198.18.0.1:7999 RMR_JOB_SECRET="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')")
ip netns exec $P-b env "${common[@]}" RMR_RANK=1 RMR_NODE=host-b \
  RMR_DSM_SPEC="multirail:tcp:198.18.0.2,tcp:198.18.1.2" taskset -c 1 "$D" "$@" > /dev/null &
ip netns exec $P-a env "${common[@]}" RMR_RANK=0 RMR_NODE=host-a \
  RMR_DSM_SPEC="multirail:tcp:198.18.0.1,tcp:198.18.1.1" taskset -c 0 "$D" "$@"
wait
