#!/usr/bin/env python3
"""Checks that the modules of a crate depend on each other in one direction
only: no circle, so there is an order to read them in.

    python3 scripts/module-dag.py CRATE_DIR [CRATE_DIR ...]

A module is a top-level module of the crate (src/<m>.rs or src/<m>/);
an edge m -> n is any `crate::n` path in m's files (`super::n` in the
module's own top-level file; comments included:
a doc link is a dependency of the reader too). A path through a root
re-export (`crate::Item`, re-exported in lib.rs by `pub use n::Item`) is
resolved to n. Prints each crate's order (dependencies first) or its
circles, and exits 1 when any crate has one."""
import os, re, sys

def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)
            top = rel.split(os.sep)[0]
            name = top[:-3] if top.endswith(".rs") else top
            if name in ("lib", "main"):
                continue
            mods.setdefault(name, []).append(p)
    return mods

def reexports(lib, mods):
    """Root item -> module it comes from (`pub use m::{A, B}` / `pub use m::A`)."""
    out = {}
    text = open(lib).read()
    for m in re.finditer(r"pub use (?:crate::)?(\w+)::(\{[^;]*\}|[\w:]+)(?: as (\w+))?;", text, re.S):
        mod, items, alias = m.group(1), m.group(2), m.group(3)
        if mod not in mods:
            continue
        if items.startswith("{"):
            for it in re.split(r",", items.strip("{} \n")):
                it = it.strip()
                if not it:
                    continue
                name = it.split(" as ")[-1].split("::")[-1].strip()
                out[name] = mod
        else:
            out[alias or items.split("::")[-1]] = mod
    # `macro_rules!` exported at the root count for their defining module.
    for mod, files in mods.items():
        for p in files:
            for mm in re.finditer(r"#\[macro_export\][^\n]*\n(?:#\[[^\n]*\]\n)*macro_rules! (\w+)", open(p).read()):
                out[mm.group(1)] = mod
    return out

def edges(crate):
    src = os.path.join(crate, "src")
    mods = modules(src)
    lib = os.path.join(src, "lib.rs")
    rex = reexports(lib, mods) if os.path.exists(lib) else {}
    e = {m: set() for m in mods}
    for m, files in mods.items():
        for p in files:
            text = open(p).read()
            # In a top-level module's own file (src/m.rs, src/m/mod.rs),
            # `super::` is the crate root: the same as `crate::`.
            if os.path.dirname(p) == src or os.path.basename(p) == "mod.rs" and os.path.dirname(os.path.dirname(p)) == src:
                text = re.sub(r"\bsuper::", "crate::", text)
            # `use crate::{a::X, b, C}` groups, then plain `crate::x` paths.
            names = []
            for g in re.finditer(r"crate::\{([^;]*?)\}", text, re.S):
                names += [re.split(r"[:\s{},]", x.strip())[0] for x in re.split(r",(?![^{]*\})", g.group(1)) if x.strip()]
            names += re.findall(r"crate::(\w+)", text)
            for n in names:
                t = n if n in mods else rex.get(n)
                if t and t != m:
                    e[m].add(t)
    return e

def order(e):
    """Topological order, or the strongly connected components of size > 1."""
    idx, low, on, st, sccs, i = {}, {}, set(), [], [], [0]
    def strong(v):
        idx[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
        for w in sorted(e[v]):
            if w not in idx:
                strong(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            c = []
            while True:
                w = st.pop(); on.discard(w); c.append(w)
                if w == v:
                    break
            sccs.append(c)
    sys.setrecursionlimit(10000)
    for v in sorted(e):
        if v not in idx:
            strong(v)
    circles = [sorted(c) for c in sccs if len(c) > 1]
    return [c[0] for c in sccs], circles

def main():
    bad = False
    for crate in sys.argv[1:]:
        e = edges(crate)
        topo, circles = order(e)
        if circles:
            bad = True
            print(f"{crate}: circles between modules:")
            for c in circles:
                inner = [f"{a} -> {b}" for a in c for b in sorted(e[a]) if b in c]
                print("  " + ", ".join(inner))
        else:
            print(f"{crate}: reading order (each module uses only those before it): {', '.join(topo)}")
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    main()
