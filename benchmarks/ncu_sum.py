#!/usr/bin/env python3
"""Sum `ncu --metrics gpu__time_duration.sum --csv --page raw` output per kernel name.

    python3 benchmarks/ncu_sum.py ncu.csv [TOP]

Prints the total and the TOP kernels by summed time (count, mean, name truncated to 100 chars).
"""
import csv
import sys
from collections import defaultdict


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rows = list(csv.reader(open(path, newline="")))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    name_c, time_c = cols.index("Kernel Name"), cols.index("gpu__time_duration.sum")
    unit = rows[head + 1][time_c] if len(rows) > head + 1 else "ns"
    scale = {"ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(unit, 1e-6)
    total, per = 0.0, defaultdict(lambda: [0.0, 0])
    for r in rows[head + 1:]:
        try:
            t = float(r[time_c].replace(",", "")) * scale
        except (ValueError, IndexError):
            continue
        total += t
        per[r[name_c]][0] += t
        per[r[name_c]][1] += 1
    print(f"total {total:.3f} ms over {sum(c for _, c in per.values())} kernels (unit {unit})")
    for name, (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{t:9.3f} ms {c:6d}x {t / c * 1e3:9.2f} us  {name[:100]}")


if __name__ == "__main__":
    main()
