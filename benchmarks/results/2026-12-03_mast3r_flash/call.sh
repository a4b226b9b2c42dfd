#!/usr/bin/env bash
# #26 item 4: cubek's flash attention (blackbox-accelerated, binary16 fragments) in place of
# cuBLAS scores + fused softmax + cuBLAS product. .dev/bin/base.xz (d624cac) and new.xz (flash
# on CUDA), alternating, f32 (TF32) and f16 twice each; ncu's per-kernel time of the new binary.
# Carry .dev/bin. Output: stdout.txt, r/ (the base binary's files). The flash binary was slower
# in f16 and could not launch in f32, so its fixture parity was not run and its code not kept.
set -uo pipefail
mkdir -p /tmp/r3 $OUT/r
for b in base new; do xz -dc .dev/bin/$b.xz > /tmp/r3/$b; chmod +x /tmp/r3/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bench() { timeout 120 /tmp/r3/$1 bench mast3r --backend cuda --size full --precision $2 --iters 20 --warmup 5 --graph --json $OUT/r/bench_$1_$2_$3.json > $OUT/r/bench_$1_$2_$3.txt 2>&1; echo "bench $1 $2 $3 rc $?: $(grep -E 'pair_rp' $OUT/r/bench_$1_$2_$3.txt)"; grep -i -m2 "flash\|warn" $OUT/r/bench_$1_$2_$3.txt; }
for rep in 1 2; do for b in base new; do bench $b f32 $rep; bench $b f16 $rep; done; done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
timeout 200 $NCU /tmp/r3/new bench mast3r --backend cuda --size full --precision f32 --iters 1 --warmup 0 > $OUT/r/ncu_new_f32.csv 2> $OUT/r/ncu_new_f32.err; echo "ncu rc $?"
python3 benchmarks/ncu_sum.py $OUT/r/ncu_new_f32.csv 40 > $OUT/r/ncu_new_f32_sum.txt; cat $OUT/r/ncu_new_f32_sum.txt
rm -f $OUT/r/ncu_new_f32.csv
