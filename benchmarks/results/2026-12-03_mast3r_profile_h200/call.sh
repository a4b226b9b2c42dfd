#!/usr/bin/env bash
# #26 item 4: where the TF32 network's time goes after the fused kernels (commit bb30300's
# network): the replayed per-frame figure twice, then ncu's per-kernel device time of one
# unreplayed run (4 encodings, 2 decodes and the random weights). Run from the repository root.
set -uo pipefail
mkdir -p /tmp/r3 $OUT/r
xz -dc .dev/bin/new.xz > /tmp/r3/new && chmod +x /tmp/r3/new
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for rep in 1 2; do
  timeout 120 /tmp/r3/new bench mast3r --backend cuda --size full --precision f32 --iters 20 --warmup 5 --graph --json $OUT/r/bench_f32_$rep.json > $OUT/r/bench_f32_$rep.txt 2>&1; echo "bench rc $?"; tail -4 $OUT/r/bench_f32_$rep.txt
done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
timeout 300 $NCU /tmp/r3/new bench mast3r --backend cuda --size full --precision f32 --iters 1 --warmup 0 > $OUT/r/ncu_f32.csv 2> $OUT/r/ncu_f32.err; echo "ncu rc $?"
python3 benchmarks/ncu_sum.py $OUT/r/ncu_f32.csv 70 > $OUT/r/ncu_f32_sum.txt; cat $OUT/r/ncu_f32_sum.txt
xz -6 $OUT/r/ncu_f32.csv
