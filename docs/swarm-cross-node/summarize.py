#!/usr/bin/env python3
"""summarize.py results.csv — medians per test and mode, skip/plain ratio, load range."""
import csv, statistics, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
v = collections.defaultdict(list); load = collections.defaultdict(list)
for r in rows:
    if r["value"]:
        v[(r["test"], r["mode"])].append(float(r["value"])); load[r["test"]].append(float(r["loadavg1"]))
tests = list(dict.fromkeys(r["test"] for r in rows))
print("| test | plain median | skip median | skip/plain | n (per mode) | plain runs | skip runs | load1 range |")
print("|---|---|---|---|---|---|---|---|")
for t in tests:
    p, s = v[(t, "plain")], v[(t, "skip")]
    if not p or not s: continue
    mp, ms = statistics.median(p), statistics.median(s)
    lower_better = t.endswith("_us")
    ratio = (mp / ms) if lower_better else (ms / mp)
    fmt = lambda xs: " ".join(f"{x:g}" for x in xs)
    print(f"| {t} | {mp:g} | {ms:g} | {ratio:.3f}× {'(plain/skip, lower is better)' if lower_better else ''} | {len(p)}/{len(s)} | {fmt(p)} | {fmt(s)} | {min(load[t]):.2f}–{max(load[t]):.2f} |")

# Paired: the ratio within each round (plain and skip ran back to back), then its median.
pairs = collections.defaultdict(dict)
for r in rows:
    if r["value"]:
        pairs[(r.get("set", ""), r["round"], r["test"])][r["mode"]] = float(r["value"])
print()
print("| test | median of per-round ratios (>1 = skip better) | per-round ratios |")
print("|---|---|---|")
for t in tests:
    rs = []
    for (st, rd, tt), m in sorted(pairs.items()):
        if tt == t and "plain" in m and "skip" in m:
            rs.append(m["plain"] / m["skip"] if t.endswith("_us") else m["skip"] / m["plain"])
    if rs:
        print(f"| {t} | {statistics.median(rs):.3f}× | {' '.join(f'{x:.3f}' for x in rs)} |")
