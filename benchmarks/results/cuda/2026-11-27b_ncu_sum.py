import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
# find header row
hi = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[hi]; k = h.index("Kernel Name"); m = h.index("gpu__time_duration.sum")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[hi + 1:]:
    if len(r) <= m: continue
    try: v = float(r[m].replace(",", ""))
    except ValueError: continue
    name = r[k].split("(")[0][:90]
    tot[name] += v; cnt[name] += 1
S = sum(tot.values())
print(f"total {S/1e6:.3f} ms (ns units assumed) over {sum(cnt.values())} kernels")
for n, v in sorted(tot.items(), key=lambda x: -x[1])[:int(sys.argv[2]) if len(sys.argv) > 2 else 40]:
    print(f"{v/1e6:9.3f} ms {cnt[n]:6d}x {v/cnt[n]/1e3:9.2f} us  {n}")
