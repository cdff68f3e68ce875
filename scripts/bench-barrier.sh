#!/usr/bin/env bash
# The barrier sweep behind BENCHMARKS.md: RDMA vs send/recv barrier for 2..16
# local processes, shared memory off (every process on the schedule) and on
# (pretend nodes of 2 processes each: the masters run the schedule), and
# beside them Open MPI's MPI_Barrier over the same process counts, as an HPC
# user would compare (benches/c/mpi_barrier.c, built with mpicc here): the
# transports Open MPI picks by default (shared memory between local ranks)
# and `--mca btl tcp,self` (TCP only) as a second row. MPI=0 skips those.
# Writes JSON lines to OUT (default bench-out/barrier.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench-out/barrier.jsonl}; mkdir -p "$(dirname "$OUT")"; : > "$OUT"
BACKEND=${BACKEND:-tcp}; ITERS=${ITERS:-2000}
cargo build --release -q -p rmr-bench
B=target/release/rmr-bench
MPI=${MPI:-1}
if [ "$MPI" != 0 ]; then
  [ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin >/dev/null; }
  M=$(mktemp -d /tmp/rmr-mpi.XXXXXX); trap 'rm -rf "$M"' EXIT
  mpicc -O2 -o "$M/mpi_barrier" benches/c/mpi_barrier.c
fi
mpi() { # procs label [mca args]
  local n=$1 label=$2; shift 2
  mpirun --allow-run-as-root --oversubscribe -np "$n" "$@" "$M/mpi_barrier" "$ITERS" "$label" 2>/dev/null
}
for n in 2 3 4 5 6 8 10 12 14 16; do
  "$B" barrier --procs "$n" --backend "$BACKEND" --shm off --iters "$ITERS" --json | tee -a "$OUT"
  "$B" barrier --procs "$n" --backend "$BACKEND" --shm on --nodes $(( (n + 1) / 2 )) --iters "$ITERS" --json | tee -a "$OUT"
  if [ "$MPI" != 0 ]; then
    # Like with like for MPI_Barrier: every process on one node, meeting
    # in rmr's shared-memory stage (as Open MPI's ranks meet in its).
    "$B" barrier --procs "$n" --backend "$BACKEND" --shm on --nodes 1 --algo rdma --iters "$ITERS" --json \
      | sed 's/"test":"barrier"/"test":"barrier","one_node":true/' | tee -a "$OUT"
    mpi "$n" mpi | tee -a "$OUT"
    mpi "$n" mpi-tcp --mca btl tcp,self | tee -a "$OUT"
  fi
done
# The goal's check, like with like: rmr's one-node barrier and MPI_Barrier
# at 8 and 16 processes in MPI_ROUNDS interleaved rounds (rmr, then MPI,
# each round); the verdict takes the medians.
if [ "$MPI" != 0 ]; then
  for round in $(seq "${MPI_ROUNDS:-5}"); do
    for n in 8 16; do
      "$B" barrier --procs "$n" --backend "$BACKEND" --shm on --nodes 1 --algo rdma --iters "$ITERS" --json \
        | sed "s/\"test\":\"barrier\"/\"test\":\"barrier\",\"one_node\":true,\"round\":$round/" | tee -a "$OUT"
      mpi "$n" mpi | sed "s/\"algo\":\"mpi\"/\"algo\":\"mpi\",\"round\":$round/" | tee -a "$OUT"
    done
  done
fi
echo "wrote $OUT"
