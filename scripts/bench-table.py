#!/usr/bin/env python3
"""Turns scripts/bench-lab.sh output (JSON lines) into the Markdown tables of
BENCHMARKS.md: python3 scripts/bench-table.py bench-out/lab"""
import json, sys, os

d = sys.argv[1] if len(sys.argv) > 1 else "bench-out/lab"

def load(name):
    rows = []
    p = os.path.join(d, name + ".jsonl")
    if os.path.exists(p):
        for line in open(p):
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("test") != "meta":  # a run's metadata line
                    rows.append(r)
    return rows

def h(n):
    for s, u in ((20, "M"), (10, "K")):
        if n >= 1 << s and n % (1 << s) == 0:
            return f"{n >> s}{u}"
    return str(n)

def find(rows, **kw):
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None

def f(x, p=0):
    return "-" if x is None else f"{x:.{p}f}"

def med(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None

def runs_of(rows, s):
    """The rounds' runs of size `s`, in round order: (one rail, two rails
    inline, two rails pinned)."""
    pick = lambda e: [r for r in rows if r["size"] == s and
                      (r["rails"] == 1 if e is None else r["rails"] == 2 and r.get("engine") == e)]
    return pick(None), pick("inline"), pick("pinned")

def lat_ratio(one, many):
    """The median over paired rounds of many / one latency (rows in round order)."""
    return med(b["lat_us"] / a["lat_us"] for a, b in zip(one, many) if a.get("lat_us") and b.get("lat_us"))

def ratios(rows_a, rows_b, k="mbps"):
    """Each round's ratio b/a (rows in round order), comma separated; a
    paired row (`--paired`) carries its own against its one-rail partner."""
    if rows_b and all(b.get("ratio_one") for b in rows_b):
        return ", ".join(f"{b['ratio_one']:.2f}" for b in rows_b)
    return ", ".join(f"{b[k] / a[k]:.2f}" for a, b in zip(rows_a, rows_b) if a.get(k) and b.get(k)) or "-"

eq = load("equal")
eq_iperf = [r for r in eq if r["test"] == "iperf3"]
eq = [r for r in eq if r["test"] != "iperf3"]
sizes = sorted({r["size"] for r in eq if r["test"] == "bw"})
print("### Two equal rails, 1 Gbit/s each: RDMA write bandwidth (Mbit/s, median)\n")
print("| size | raw TCP 1 stream | rmr 1 rail | ratio | raw TCP 2 streams | inline | fork-join | pinned | inline / 1 rail | pinned / 1 rail | pinned / inline | inline / raw sum |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in sizes:
    one = find(eq, test="bw", rails=1, size=s) or {}
    e = {x: find(eq, test="bw", rails=2, engine=x, size=s) or {} for x in ("inline", "fork-join", "pinned")}
    o = one.get("mbps")
    ratio = lambda a, b: f(a / b, 2) if a and b else "-"
    raw2 = e["inline"].get("raw_mbps")
    print(f"| {h(s)} | {f(one.get('raw_mbps'))} | {f(o)} | {f(one.get('ratio_raw'), 2)} | {f(raw2)} | "
          f"{f(e['inline'].get('mbps'))} | {f(e['fork-join'].get('mbps'))} | {f(e['pinned'].get('mbps'))} | "
          f"{ratio(e['inline'].get('mbps'), o)} | {ratio(e['pinned'].get('mbps'), o)} | "
          f"{ratio(e['pinned'].get('mbps'), e['inline'].get('mbps'))} | {ratio(e['inline'].get('mbps'), raw2)} |")

eqr = load("equal-rounds")
if eqr:
    n = len([r for r in eqr if r["rails"] == 1 and r["size"] == eqr[0]["size"]])
    print(f"\n### Two equal rails in {n} interleaved rounds (each round: one rail, then two rails pinned+even and inline+even paired in one run; Mbit/s, median of each run)\n")
    print("| size | 1 rail (each round) | pinned (each round) | inline (each round) | pinned / 1 rail (each round) | median | pinned / inline (each round) | median |")
    print("|---|---|---|---|---|---|---|---|")
    for s in sorted({r["size"] for r in eqr}):
        a, i, p = runs_of(eqr, s)
        po = [y["mbps"] / x["mbps"] for x, y in zip(a, p)]
        pi = [y["mbps"] / x["mbps"] for x, y in zip(i, p)]
        print(f"| {h(s)} | {', '.join(f(r['mbps']) for r in a)} | {', '.join(f(r['mbps']) for r in p)} | "
              f"{', '.join(f(r['mbps']) for r in i)} | {ratios(a, p)} | {f(med(po), 2)} | {ratios(i, p)} | {f(med(pi), 2)} |")

th = [r for r in eq if r["test"] == "bw" and r.get("threshold") in (1024, 1 << 30)]
if th:
    print("\n### Stripe threshold: two equal rails, pinned, even (Mbit/s, median)\n")
    print("| size | always stripe (threshold 1K) | never stripe (threshold 1G: whole DTOs, on the control rail until 1 GiB is in flight there) | default (32K) |")
    print("|---|---|---|---|")
    for s in sorted({r["size"] for r in th}):
        a = (find(th, size=s, threshold=1024) or {}).get("mbps")
        b = (find(th, size=s, threshold=1 << 30) or {}).get("mbps")
        dflt = (find(eq, test="bw", rails=2, engine="pinned", policy="even", size=s, threshold=32768) or {}).get("mbps")
        print(f"| {h(s)} | {f(a)} | {f(b)} | {f(dflt)} |")

print("\n### Policies, two equal rails, pinned engine: RDMA write bandwidth (Mbit/s, median)\n")
pols = ["single", "round-robin", "even", "weighted:1,1", "adaptive"]
print("| size | " + " | ".join(pols) + " |")
print("|---|" + "---|" * len(pols))
for s in sorted({r["size"] for r in eq if r["test"] == "bw" and r.get("policy") == "round-robin"}):
    row = [(find(eq, test="bw", rails=2, engine="pinned", policy=p, size=s) or {}).get("mbps") for p in pols]
    print(f"| {h(s)} | " + " | ".join(f(x) for x in row) + " |")

print("\n### Bi-directional (Mbit/s, both directions together)\n")
print("| size | 1 rail | 2 rails inline | 2 rails fork-join | 2 rails pinned | pinned / 1 rail |")
print("|---|---|---|---|---|---|")
for s in sorted({r["size"] for r in eq if r["test"] == "bibw"}):
    a = find(eq, test="bibw", rails=1, size=s) or {}
    e = {x: (find(eq, test="bibw", rails=2, engine=x, size=s) or {}).get("mbps") for x in ("inline", "fork-join", "pinned")}
    r = f(e["pinned"] / a["mbps"], 2) if e["pinned"] and a.get("mbps") else "-"
    print(f"| {h(s)} | {f(a.get('mbps'))} | {f(e['inline'])} | {f(e['fork-join'])} | {f(e['pinned'])} | {r} |")

lrounds = len([r for r in eq if r["test"] == "lat" and r["rails"] == 1 and r["size"] == 8])
print(f"\n### Write + notify half round trip (us, median; figures are medians of {lrounds} rounds, each pinning its two-rail run to a one-rail run taking turns with it in one client, `--paired`)\n")
print("| size | raw TCP ping-pong, busy-polling (the floor) | rmr 1 rail | rmr / raw | 2 rails inline | 2 rails pinned | pinned / 1 rail (median) | pinned / 1 rail (each round) |")
print("|---|---|---|---|---|---|---|---|")
for s in sorted({r["size"] for r in eq if r["test"] == "lat"}):
    one = [r for r in eq if r["test"] == "lat" and r["rails"] == 1 and r["size"] == s]
    i = [r for r in eq if r["test"] == "lat" and r["rails"] == 2 and r.get("engine") == "inline" and r["size"] == s]
    p = [r for r in eq if r["test"] == "lat" and r["rails"] == 2 and r.get("engine") == "pinned" and r["size"] == s]
    rm = lat_ratio(one, p)
    print(f"| {h(s)} | {f(med(r.get('raw_lat_us') for r in one), 1)} | {f(med(r.get('lat_us') for r in one), 1)} | "
          f"{f(med(r.get('ratio_raw') for r in one), 2)} | {f(med(r.get('lat_us') for r in i), 1)} | "
          f"{f(med(r.get('lat_us') for r in p), 1)} | {f(rm, 2)} | {ratios(one, p, 'lat_us')} |")

print(f"\n### Tails of the same rounds: one rail's write + notify half round trip (us; each figure the median over the {lrounds} rounds)\n")
print("| size | min | p50 | p99 | p99.9 | raw TCP p50 |")
print("|---|---|---|---|---|---|")
for s in sorted({r["size"] for r in eq if r["test"] == "lat"}):
    one = [r for r in eq if r["test"] == "lat" and r["rails"] == 1 and r["size"] == s]
    print(f"| {h(s)} | {f(med(r.get('lat_min_us') for r in one), 1)} | {f(med(r.get('lat_us') for r in one), 1)} | "
          f"{f(med(r.get('lat_p99_us') for r in one), 1)} | {f(med(r.get('lat_p999_us') for r in one), 1)} | "
          f"{f(med(r.get('raw_lat_us') for r in one), 1)} |")

ipf = eq_iperf
if ipf:
    print("\n### iperf3 on the same shaped rails, same run (the bandwidth floor; Mbit/s, one stream per rail, 5 s)\n")
    print("| streams | iperf3 | rmr at 1 MiB (1 rail / 2 rails pinned+even) | rmr / iperf3 |")
    print("|---|---|---|---|")
    for n in sorted({r["rails"] for r in ipf}):
        i = med(r["mbps"] for r in ipf if r["rails"] == n)
        if n == 1:
            m = (find(eq, test="bw", rails=1, size=1 << 20) or {}).get("mbps")
        else:
            m = (find(eq, test="bw", rails=2, engine="pinned", policy="even", size=1 << 20) or {}).get("mbps")
        print(f"| {n} | {f(i)} | {f(m)} | {f(m / i, 2) if m and i else '-'} |")

jb = load("jumbo")
if jb:
    n = len([r for r in jb if r["rails"] == 1 and r["size"] == 8])
    print(f"\n### The same with jumbo frames (MTU 9000): write + notify half round trip (us, median of {n} paired rounds)\n")
    print("| size | rmr 1 rail | 2 rails pinned | pinned / 1 rail (median) | pinned / 1 rail (each round) |")
    print("|---|---|---|---|---|")
    for s in sorted({r["size"] for r in jb}):
        one = [r for r in jb if r["rails"] == 1 and r["size"] == s]
        p = [r for r in jb if r["rails"] == 2 and r["size"] == s]
        rm = lat_ratio(one, p)
        print(f"| {h(s)} | {f(med(r.get('lat_us') for r in one), 1)} | {f(med(r.get('lat_us') for r in p), 1)} | "
              f"{f(rm, 2)} | {ratios(one, p, 'lat_us')} |")

print("\n### Time breakdown, two rails (us per sample of 20 writes + notify)\n")
print("| size | engine | Mbit/s | in post calls | waiting for the reply |")
print("|---|---|---|---|---|")
for r in eq:
    if r["test"] == "breakdown":
        print(f"| {h(r['size'])} | {r['engine']} | {f(r.get('mbps'))} | {f(r.get('post_us'))} | {f(r.get('wait_us'))} |")

un = load("unshaped")
uip = [r for r in un if r["test"] == "iperf3"]
un = [r for r in un if r["test"] != "iperf3"]
rounds = len([r for r in un if r["rails"] == 2 and r.get("engine") == "pinned" and r["size"] == max((x["size"] for x in un), default=0)])
paired = any(r.get("paired") for r in un)
how = ", each two-rail run paired with a one-rail run taking turns with it in one client (`--paired`)" if paired else ""
print(f"\n### Two unshaped rails (CPU-bound, 2 cores): Mbit/s, median of {rounds} interleaved rounds{how}\n")
print("| size | raw 1 stream | rmr 1 rail | raw 2 streams | 2 rails inline | 2 rails pinned | inline / 1 rail (each round) | pinned / 1 rail (each round) |")
print("|---|---|---|---|---|---|---|---|")
for s in sorted({r["size"] for r in un}):
    one, i, p = runs_of(un, s)
    print(f"| {h(s)} | {f(med(r.get('raw_mbps') for r in one))} | {f(med(r.get('mbps') for r in one))} | "
          f"{f(med(r.get('raw_mbps') for r in i))} | {f(med(r.get('mbps') for r in i))} | {f(med(r.get('mbps') for r in p))} | "
          f"{ratios(one, i)} | {ratios(one, p)} |")
if uip:
    print("\nThe same rounds' iperf3 (one stream per rail, 5 s each; Mbit/s, each round): "
          + "; ".join(f"{n} stream{'s' if n > 1 else ''}: median {f(med(r['mbps'] for r in uip if r['rails'] == n))} ("
                      + ", ".join(f(r["mbps"]) for r in uip if r["rails"] == n) + ")"
                      for n in sorted({r["rails"] for r in uip})))

if any(r.get("cpus") is not None for r in un):
    print(f"\n### The same runs: busy CPUs (of 2, both ends together, from /proc/stat) and Mbit/s per busy CPU, medians\n")
    print("| size | raw 1 stream | rmr 1 rail | raw 2 streams | 2 rails inline | 2 rails pinned |")
    print("|---|---|---|---|---|---|")
    def cpu(rows, k="cpus", m="mbps"):
        c = med(r.get(k) for r in rows)
        e = med(r[m] / r[k] for r in rows if r.get(k) and r.get(m))
        return f"{f(c, 2)} ({f(e)})"
    for s in sorted({r["size"] for r in un}):
        one = [r for r in un if r["rails"] == 1 and r["size"] == s]
        i = [r for r in un if r["rails"] == 2 and r.get("engine") == "inline" and r["size"] == s]
        p = [r for r in un if r["rails"] == 2 and r.get("engine") == "pinned" and r["size"] == s]
        print(f"| {h(s)} | {cpu(one, 'raw_cpus', 'raw_mbps')} | {cpu(one)} | {cpu(i, 'raw_cpus', 'raw_mbps')} | {cpu(i)} | {cpu(p)} |")

ue = load("uneven")
print("\n### Rails of 4:1 speed (400 + 100 Mbit/s), pinned engine: Mbit/s\n")
print("| size | raw rail 0 | raw rail 1 | raw sum | even | adaptive | weighted:4,1 | adaptive / raw sum | even / (2 x slow rail) |")
print("|---|---|---|---|---|---|---|---|---|")
for s in sorted({r["size"] for r in ue}):
    r0 = [r for r in ue if r["rails"] == 1 and r["size"] == s]
    raw = [r.get("raw_mbps") for r in r0]
    tot = sum(x for x in raw if x) if raw else None
    slow = min(x for x in raw if x) if raw else None
    pol = {p: (find(ue, rails=2, policy=p, size=s) or {}).get("mbps") for p in ("even", "adaptive", "weighted:4,1")}
    print(f"| {h(s)} | {f(raw[0] if raw else None)} | {f(raw[1] if len(raw) > 1 else None)} | {f(tot)} | {f(pol['even'])} | {f(pol['adaptive'])} | {f(pol['weighted:4,1'])} | "
          f"{f(pol['adaptive'] / tot, 2) if pol['adaptive'] and tot else '-'} | {f(pol['even'] / (2 * slow), 2) if pol['even'] and slow else '-'} |")

of = load("ofi")
if of:
    print("\n### One 1 Gbit/s rail: tcp backend vs libfabric (ofi:tcp)\n")
    print("Bandwidth rows have beside them a plain libfabric program (benches/c/fi_rma_bw.c: "
          "msg endpoint, `-p tcp`, RMA writes in samples of 20 and a notify, as rmr-bench's; median sample).\n")
    print("| test | size | raw TCP | tcp backend | ofi:tcp | ofi / tcp | plain libfabric | ofi:tcp / plain libfabric |")
    print("|---|---|---|---|---|---|---|---|")
    for t, k in (("bw", "mbps"), ("lat", "lat_us")):
        for s in sorted({r["size"] for r in of if r["test"] == t}):
            a = find(of, test=t, backend="tcp", size=s) or {}
            b = find(of, test=t, backend="ofi:tcp", size=s) or {}
            raw = a.get("raw_mbps") if t == "bw" else a.get("raw_lat_us")
            r = f(b[k] / a[k], 2) if b.get(k) and a.get(k) else "-"
            p = 0 if t == "bw" else 1
            c = (find(of, test="fi_rma_bw", backend="fi_rma_bw:tcp", size=s) or {}).get("mbps") if t == "bw" else None
            rc = f(b[k] / c, 2) if c and b.get(k) else "-"
            print(f"| {t} | {h(s)} | {f(raw, p)} | {f(a.get(k), p)} | {f(b.get(k), p)} | {r} | {f(c, 0)} | {rc} |")
    fpp = [r for r in of if r["test"] == "fi_pingpong"]
    if fpp:
        n = len([r for r in fpp if r["backend"] == "fi_pingpong:tcp" and r["size"] == 8])
        print(f"\n### ofi vs libfabric: half round trip, means (fi_pingpong prints a mean; us, median over {n} interleaved rounds; both ends pinned, client CPU 0, server CPU 1)\n")
        print("The `sockets` provider's own fi_pingpong takes milliseconds per round trip on this host "
              "(its progress thread's timing), so it is shown but is no floor; the verdicts use `-p tcp`.\n")
        print("| size | fi_pingpong -p tcp -e msg | rmr ofi:tcp | ofi:tcp / fi_pingpong | fi_pingpong -p sockets | rmr tcp backend | ofi:tcp / tcp backend |")
        print("|---|---|---|---|---|---|---|")
        for s in sorted({r["size"] for r in fpp}):
            fp = med(r["lat_mean_us"] for r in fpp if r["backend"] == "fi_pingpong:tcp" and r["size"] == s)
            fs = med(r["lat_mean_us"] for r in fpp if r["backend"] == "fi_pingpong:sockets" and r["size"] == s)
            ro = med(r.get("lat_mean_us") for r in of if r["test"] == "lat" and r["backend"] == "ofi:tcp" and r["size"] == s)
            rt = med(r.get("lat_mean_us") for r in of if r["test"] == "lat" and r["backend"] == "tcp" and r["size"] == s)
            print(f"| {h(s)} | {f(fp, 1)} | {f(ro, 1)} | {f(ro / fp, 2) if ro and fp else '-'} | {f(fs, 1)} | {f(rt, 1)} | {f(ro / rt, 2) if ro and rt else '-'} |")
    wpp = {m: med(r["lat_mean_us"] for r in of if r["test"] == "fi_wpp" and r.get("mode") == m) for m in ("msg", "wn", "wd")}
    if of and all(wpp.values()):
        print("\nThe same rail in plain libfabric (benches/c/fi_wpp.c: one `tcp` endpoint busy-polling its CQ, three 8 B "
              "ping-pongs taking turns; us, median over the rounds, and ratios of those medians): a send "
              f"{wpp['msg']:.1f}; an RMA write then a 128 B send, the ofi backend's two operations, {wpp['wn']:.1f} "
              f"({wpp['wn'] / wpp['msg']:.2f}x the send); the same bytes as one RMA write of two pieces with remote "
              f"CQ data {wpp['wd']:.1f} ({wpp['wd'] / wpp['msg']:.2f}x).")
