#!/usr/bin/env bash
# The dsm example (Jacobi heat in rmr shared memory) as two processes on two
# hosts of the lab joined by two shaped rails, each process on a 2-rail
# multirail EP. Prints rank 0's result line (bit_identical=true expected).
#   scripts/dsm-lab.sh [RATES] [dsm args...]     e.g. scripts/dsm-lab.sh 1gbit,1gbit --iters 100
set -euo pipefail
cd "$(dirname "$0")/.."
RATES=${1:-1gbit,1gbit}; shift || true
P=rmrdsm
trap 'scripts/lab.sh down $P' EXIT
cargo build --release -q -p rmr-examples --example dsm
D=$PWD/target/release/examples/dsm
scripts/lab.sh pair $P "$RATES" >/dev/null
common=(RMR_SIZE=2 RMR_ROOT=198.18.0.1:7999 RMR_JOB_SECRET="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')")
ip netns exec $P-b env "${common[@]}" RMR_RANK=1 \
  RMR_DSM_SPEC="multirail:tcp:198.18.0.2,tcp:198.18.1.2" "$D" "$@" > /dev/null &
ip netns exec $P-a env "${common[@]}" RMR_RANK=0 \
  RMR_DSM_SPEC="multirail:tcp:198.18.0.1,tcp:198.18.1.1" "$D" "$@"
wait
