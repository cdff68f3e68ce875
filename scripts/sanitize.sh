#!/usr/bin/env bash
# Undefined-behaviour checks the compiler cannot do:
# - Miri over the pure modules (registered memory and its raw-pointer
#   accessors, the multirail planner, the tcp and shm frame codecs). Tests that need
#   sockets, mmap, /proc or real time are #[cfg_attr(miri, ignore)];
#   proptests run few cases.
# - ThreadSanitizer over the tcp, multirail and shm conformance suites
#   (real sockets and shared rings, every thread of the transports). Any report fails the run
#   (halt_on_error). No suppression is needed today: the kernel's writes
#   into registered memory (recv(2) on the transport's behalf, as a NIC's
#   DMA) reach the application only after the completion's hand-off, which
#   TSan sees as a happens-before edge. Built with --cfg rmr_plain_words:
#   region copies go word by word in Rust, which TSan sees (it does not
#   see inside the asm! of the long runs). TSAN=0 skips this part.
# Idempotent: installs the nightly components it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup +nightly component add miri rust-src >/dev/null 2>&1 || rustup +nightly component add miri rust-src
export PROPTEST_CASES=${PROPTEST_CASES:-4}
# proptest would write regression files outside the crate: Miri's isolation refuses that.
export MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-disable-isolation"
# A target dir of its own, so that Miri's builds never invalidate the main one.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri-build}
cargo +nightly miri test -q -p rmr-api --lib
cargo +nightly miri test -q -p multirail --lib planner
cargo +nightly miri test -q -p backend-tcp --lib wire
cargo +nightly miri test -q -p backend-shm --lib wire

if [ "${TSAN:-1}" != 0 ]; then
  export TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}"
  for p in backend-tcp multirail backend-shm; do
    RUSTFLAGS="-Zsanitizer=thread --cfg rmr_plain_words" MIRIFLAGS= CARGO_TARGET_DIR=target/tsan \
      cargo +nightly test -q -Zbuild-std --target x86_64-unknown-linux-gnu -p "$p" --test conformance
  done
fi
