#!/usr/bin/env bash
# Two trees' criterion benches, interleaved: builds the bench BENCH
# (default post) at OLD and NEW in worktrees of their own (kept under
# /tmp/rmr-crit-{old,new} for the next run), then runs ROUNDS rounds
# (default 5), each old then new (every other round new then old), and
# prints each benchmark's estimate per round and the median of new/old.
#   scripts/criterion-ab.sh OLD NEW [BENCH] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1; NEW=$2; BENCH=${3:-post}; ROUNDS=${4:-5}
W=/tmp/rmr-crit
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for side in old new; do
  rev=$OLD; [ "$side" = new ] && rev=$NEW
  d=$W-$side
  if [ ! -d "$d" ]; then git worktree add -f --detach "$d" "$rev" >/dev/null
  else git -C "$d" checkout -q --detach "$rev"; fi
  (cd "$d" && CARGO_TARGET_DIR=$d/target cargo bench -q -p rmr-bench --bench "$BENCH" --no-run 2>/dev/null)
done
exe() { find "$W-$1/target/release/deps" -maxdepth 1 -type f -executable -name "$BENCH-*" -printf '%T@ %p\n' | sort -rn | head -1 | cut -d' ' -f2; }
run() { (cd "$W-$1" && "$(exe "$1")" --bench --noplot 2>/dev/null) > "$OUT/$1.$2"; }
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then run old "$r"; run new "$r"; else run new "$r"; run old "$r"; fi
  echo "round $r done" >&2
done
python3 - "$OUT" "$ROUNDS" "$OLD" "$NEW" <<'PY'
import re, statistics as st, sys
out, rounds, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
unit = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6, "s": 1e9}
def parse(path):
    res, name = {}, None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if m and name:
            res[name] = float(m.group(1)) * unit[m.group(2)]
            name = None
        elif line.strip() and not line.startswith(" ") and "time:" not in line:
            name = line.split("  ")[0].strip()
            if "time:" in line:
                pass
        m2 = re.match(r"^(\S.*?)\s+time:\s+\[\S+ \S+ (\S+) (\S+)", line)
        if m2:
            res[m2.group(1).strip()] = float(m2.group(2)) * unit[m2.group(3)]
            name = None
    return res
runs = {s: [parse(f"{out}/{s}.{r}") for r in range(1, rounds + 1)] for s in ("old", "new")}
names = [n for n in runs["old"][0] if all(n in x for side in runs.values() for x in side)]
print(f"criterion medians (ns) per round, old = {old}, new = {new}")
print("| benchmark | old (each round) | new (each round) | new/old per round | median new/old |")
print("|---|---|---|---|---|")
for n in names:
    o = [x[n] for x in runs["old"]]; w = [x[n] for x in runs["new"]]
    ratios = [b / a for a, b in zip(o, w)]
    f = lambda v: ", ".join(f"{x:.0f}" for x in v)
    print(f"| {n} | {f(o)} | {f(w)} | {', '.join(f'{x:.3f}' for x in ratios)} | {st.median(ratios):.3f} |")
PY
