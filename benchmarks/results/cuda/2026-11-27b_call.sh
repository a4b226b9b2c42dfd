source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for b in cuda wgpu; do timeout 60 $R bench launch --backend $b --ops 3000 > $OUT/r/launch_$b.txt 2>&1; echo "launch $b rc $?"; cat $OUT/r/launch_$b.txt | grep round; done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
timeout 200 $NCU $R bench mast3r --backend cuda --size full --precision f32 --iters 1 --warmup 0 > $OUT/r/ncu_m.csv 2>$OUT/r/ncu_m.err; echo "ncu mast3r rc $?"
python3 .devcarry/ncu_sum.py $OUT/r/ncu_m.csv 45 > $OUT/r/ncu_m_sum.txt; cat $OUT/r/ncu_m_sum.txt
timeout 120 $NCU $R bench raster --backend cuda --npz $NPZ --iters 1 --warmup 0 --warmup-ms 0 --ns 1m --res 1920x1080 > $OUT/r/ncu_r.csv 2>$OUT/r/ncu_r.err; echo "ncu raster rc $?"
python3 .devcarry/ncu_sum.py $OUT/r/ncu_r.csv 40 > $OUT/r/ncu_r_sum.txt; cat $OUT/r/ncu_r_sum.txt
rm -f $OUT/r/*.csv
tar czf $OUT/all.tgz -C $OUT r
