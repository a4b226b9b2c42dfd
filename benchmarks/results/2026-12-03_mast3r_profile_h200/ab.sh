#!/usr/bin/env bash
# A/B of the network kernels in one call: .dev/bin/base.xz (bb30300) and new.xz, alternating:
# `bench mast3r` f32 (TF32) and f16 twice each, then the mono SLAM benchmark in f32 SLAM_REPS
# times each (default 2; call 4 ran SLAM_REPS=1: its results are ab2/), then ncu's per-kernel
# time of the new binary (.dev/rk: redkitchen 0-149).
set -uo pipefail
source benchmarks/slam_mono_runs.sh
mkdir -p /tmp/r3 $OUT/r
for b in base new; do xz -dc .dev/bin/$b.xz > /tmp/r3/$b; chmod +x /tmp/r3/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bench() { timeout 120 /tmp/r3/$1 bench mast3r --backend cuda --size full --precision $2 --iters 20 --warmup 5 --graph --json $OUT/r/bench_$1_$2_$3.json > $OUT/r/bench_$1_$2_$3.txt 2>&1; echo "bench $1 $2 $3 rc $?: $(grep -E 'pair_rp' $OUT/r/bench_$1_$2_$3.txt)"; }
for rep in 1 2; do for b in base new; do bench $b f32 $rep; bench $b f16 $rep; done; done
for rep in $(seq ${SLAM_REPS:-2}); do for b in base new; do slam_mono_run /tmp/r3/$b ${b}_f32 --gpu-tracking --timing 20; done; done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
timeout 200 $NCU /tmp/r3/new bench mast3r --backend cuda --size full --precision f32 --iters 1 --warmup 0 > $OUT/r/ncu_new_f32.csv 2> $OUT/r/ncu_new_f32.err; echo "ncu rc $?"
python3 benchmarks/ncu_sum.py $OUT/r/ncu_new_f32.csv 30 > $OUT/r/ncu_new_f32_sum.txt; cat $OUT/r/ncu_new_f32_sum.txt
rm -f $OUT/r/ncu_new_f32.csv
cd $OUT && tar cf logs.tar logs && rm -rf logs
