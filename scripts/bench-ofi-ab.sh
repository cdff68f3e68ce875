#!/usr/bin/env bash
# The ofi backend, old build against new, interleaved: the check an ofi
# change makes. Builds rmr-bench at REV (default: the first parent of HEAD)
# in a worktree of its own, then ROUNDS rounds (default 7) of each build's
# ofi:tcp half round trip (send only, 8 B and 4 KiB write+notify; 5000
# round trips; means) and RDMA-write bandwidth (64 KiB, 1 MiB), which build
# goes first alternating: on loopback, then on one shaped 1 Gbit/s lab
# rail; on both each round also runs the tcp backend (new build) and
# `fi_pingpong -p tcp -e msg` at 8, 16 and 4096 bytes, the floors of
# [ofi-fast]. With OLD_ENV="VAR=VALUE ..." the "old" side is this build
# run with those variables on both ends (a setting's A/B; REV unused).
# Servers on CPU 1, clients on CPU 0. Prints one line per
# figure (round, who, test, size, value) and then the medians, the
# medians of the rounds' new/old ratios, and new against fi_pingpong and
# the tcp backend. Cleans up its servers and namespaces (the old build's
# worktree stays, for the next run).
#   scripts/bench-ofi-ab.sh [REV] [ROUNDS]
#   OLD_ENV=RMR_OFI_POLL_SET=0 scripts/bench-ofi-ab.sh - [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-HEAD~1}; ROUNDS=${2:-7}; P=rmroa
OLD=/tmp/rmr-ofi-ab-old
OUT=$(mktemp /tmp/rmr-ofi-ab.XXXXXX)
command -v fi_pingpong >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric-bin >/dev/null; }
cleanup() {
  pkill -f "rmr-bench server --backend ofi:tcp --rails 127.0.0.1 --port 76[05]0" 2>/dev/null || true
  pkill -f "rmr-bench server .*--rails 198.18.0.2 --port 7[67][05]0" 2>/dev/null || true
  pkill -f "rmr-bench server --rails 127.0.0.1 --port 7700" 2>/dev/null || true
  pkill -f "fi_pingpong -p tcp -e msg -I 3000" 2>/dev/null || true
  scripts/lab.sh down $P >/dev/null 2>&1 || true
  rm -f "$OUT"
}
trap cleanup EXIT
cargo build --release -q -p rmr-bench
NEW_B=$PWD/target/release/rmr-bench
if [ -n "${OLD_ENV:-}" ]; then
  OLD_B=$NEW_B
else
  if [ ! -d "$OLD" ]; then git worktree add -f --detach "$OLD" "$REV" >/dev/null; else git -C "$OLD" checkout -q --detach "$REV"; fi
  (cd "$OLD" && CARGO_TARGET_DIR=$OLD/target cargo build --release -q -p rmr-bench)
  OLD_B=$OLD/target/release/rmr-bench
fi
# The variables each side runs with (`env` alone: none).
read -r -a OLD_RUN <<< "env ${OLD_ENV:-}"
NEW_RUN=(env)

# client BIN NS-PREFIX ADDR PORT TEST SIZES TAG [ARGS...]: one line per size.
client() {
  local b=$1 ns=$2 addr=$3 port=$4 test=$5 sizes=$6 tag=$7; shift 7
  local it=(); [ "$test" = lat ] && it=(--iters 5000)
  local run=("${NEW_RUN[@]}"); [ "$port" = 7600 ] && run=("${OLD_RUN[@]}")
  taskset -c 0 $ns "${run[@]}" "$b" client --json --backend ofi:tcp --rails "$addr" --port "$port" \
    --test "$test" --sizes "$sizes" "${it[@]}" "$@" 2>/dev/null | grep -v '"meta"' |
    python3 -c "
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print('$tag', '$test', d['size'], d.get('lat_mean_us', d.get('mbps')))"
}
fipp() { # size tag ns-a ns-b addr
  taskset -c 1 $4 fi_pingpong -p tcp -e msg -I 3000 -S "$1" -B 9248 >/dev/null 2>&1 &
  sleep 0.4
  taskset -c 0 $3 fi_pingpong -p tcp -e msg -I 3000 -S "$1" -P 9248 "$5" 2>/dev/null |
    awk -v s="$1" -v t="$2" '/usec\/xfer/ { h = 1; next } h && NF >= 7 { h = 0; print t, "fipp", "lat", s, $7 }'
  wait "$!" 2>/dev/null || true
}
rounds() { # link ns-prefix addr ns-prefix-of-the-server
  local link=$1 ns=$2 addr=$3 nsb=$4 r b port who
  for r in $(seq "$ROUNDS"); do
    for w in 0 1; do
      if [ $(((r + w) % 2)) = 1 ]; then b=$OLD_B; port=7600; who=old; else b=$NEW_B; port=7650; who=new; fi
      client "$b" "$ns" "$addr" $port lat 0,8,4K "$link $r $who"
      client "$b" "$ns" "$addr" $port bw 64K,1M "$link $r $who"
    done
    if true; then
      taskset -c 0 $ns "$NEW_B" client --json --rails "$addr" --port 7700 --test lat --sizes 0,8,4K \
        --iters 5000 2>/dev/null | grep -v '"meta"' | python3 -c "
import json, sys
for l in sys.stdin:
    d = json.loads(l)
    print('$link $r tcp lat', d['size'], d['lat_mean_us'])"
      for s in 8 16 4096; do fipp $s "$link $r" "$ns" "$nsb" "$addr"; done
    fi
  done
}
{
  taskset -c 1 "${OLD_RUN[@]}" "$OLD_B" server --backend ofi:tcp --rails 127.0.0.1 --port 7600 --idle 900 >/dev/null 2>&1 &
  taskset -c 1 "$NEW_B" server --backend ofi:tcp --rails 127.0.0.1 --port 7650 --idle 900 >/dev/null 2>&1 &
  taskset -c 1 "$NEW_B" server --rails 127.0.0.1 --port 7700 --idle 900 >/dev/null 2>&1 &
  sleep 1
  rounds loopback "" 127.0.0.1 ""
  pkill -f "rmr-bench server --backend ofi:tcp --rails 127.0.0.1 --port 76[05]0" 2>/dev/null || true
  pkill -f "rmr-bench server --rails 127.0.0.1 --port 7700" 2>/dev/null || true
  scripts/lab.sh pair $P 1gbit >/dev/null
  taskset -c 1 ip netns exec $P-b "${OLD_RUN[@]}" "$OLD_B" server --backend ofi:tcp --rails 198.18.0.2 --port 7600 --idle 900 >/dev/null 2>&1 &
  taskset -c 1 ip netns exec $P-b "$NEW_B" server --backend ofi:tcp --rails 198.18.0.2 --port 7650 --idle 900 >/dev/null 2>&1 &
  taskset -c 1 ip netns exec $P-b "$NEW_B" server --rails 198.18.0.2 --port 7700 --idle 900 >/dev/null 2>&1 &
  sleep 1
  rounds lab "ip netns exec $P-a" 198.18.0.2 "ip netns exec $P-b"
} | tee "$OUT"
# Whether the old build predates 25af373 (control messages of 128 bytes).
OLD128=1; git merge-base --is-ancestor 25af373 "$REV" 2>/dev/null && OLD128=0
OLD128=$OLD128 python3 - "$OUT" <<'PY'
import collections, os, statistics as st, sys
d = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 6:
        link, r, who, test, size, v = p
        d[(link, test, int(size), who)][r] = float(v)
def med(k):
    return st.median(d[k].values())
def ratio(a, b):
    rs = [d[a][r] / d[b][r] for r in d[a] if r in d[b]]
    return "%.3f (rounds %s)" % (st.median(rs), ", ".join("%.2f" % x for x in rs)) if rs else "-"
for link, test, size in sorted({k[:3] for k in d if k[3] in ("old", "new")}):
    o, n = (link, test, size, "old"), (link, test, size, "new")
    print(f"{link} {test} {size}: old {med(o):.2f} new {med(n):.2f} new/old {ratio(n, o)}")
for link in ("loopback", "lab"):
    for size, fs in ((8, 8), (4096, 4096), (0, 16)):
        for who in ("old", "new"):
            n = (link, "lat", size, who)
            if n in d:
                # A build before 25af373 sends 128-byte control messages.
                old128 = os.environ.get("OLD128") == "1"
                note = " (a build before 25af373: 128-byte messages, not like with like)" if size == 0 and who == "old" and old128 else ""
                print(f"{link} lat {size}: {who}/fi_pingpong({fs}) {ratio(n, (link, 'lat', fs, 'fipp'))}; "
                      f"{who}/tcp backend {ratio(n, (link, 'lat', size, 'tcp'))}{note}")
PY
