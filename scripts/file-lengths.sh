#!/usr/bin/env bash
# Fails when a Rust source file under the given crates is longer than MAX
# lines (one concern per file, see each crate's lib.rs map).
#   scripts/file-lengths.sh MAX CRATE_DIR...
set -euo pipefail
cd "$(dirname "$0")/.."
max=$1; shift
long=$(find "$@" -name '*.rs' -path '*/src/*' -print0 | xargs -0 wc -l | awk -v m="$max" '$2 != "total" && $1 > m')
if [ -n "$long" ]; then
  echo "source files over $max lines:"; echo "$long"; exit 1
fi
echo "no source file over $max lines in: $*"
