set -uo pipefail
mkdir -p /tmp/r3 $OUT/r && xz -dc .devcarry6/rust3r.xz > /tmp/r3/rust3r && chmod +x /tmp/r3/rust3r
R=/tmp/r3/rust3r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for p in f32 f16; do
  timeout 120 $R bench mast3r --backend cuda --size full --precision $p --iters 10 --warmup 3 --graph > $OUT/r/bench_$p.txt 2>&1; echo "bench $p rc $?"; tail -5 $OUT/r/bench_$p.txt
done
which ncu nsys
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
for p in f32 f16; do
timeout 240 $NCU $R bench mast3r --backend cuda --size full --precision $p --iters 1 --warmup 0 > $OUT/r/ncu_$p.csv 2>$OUT/r/ncu_$p.err; echo "ncu $p rc $?"
python3 .devcarry7/ncu_sum.py $OUT/r/ncu_$p.csv 60 > $OUT/r/ncu_${p}_sum.txt; cat $OUT/r/ncu_${p}_sum.txt
done
rm -f $OUT/r/*.csv
