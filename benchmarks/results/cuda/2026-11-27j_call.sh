source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -k -f .devcarry/rust3r_old.xz && chmod +x .devcarry/rust3r_old
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for rep in 1 2; do for v in old new; do
  B=$R; [ $v = old ] && B=$PWD/.devcarry/rust3r_old
  timeout 60 $B bench raster --backend cuda --npz $NPZ --iters 9 --warmup 2 --ns 4m,10m --res 1920x1080 > $OUT/r/r10_${v}_$rep.txt 2>&1; echo "$v rep $rep rc $?"; grep "^| [0-9]" $OUT/r/r10_${v}_$rep.txt
done; done
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
for v in old new; do
  B=$R; [ $v = old ] && B=$PWD/.devcarry/rust3r_old
  timeout 100 $NCU $B bench raster --backend cuda --npz $NPZ --iters 1 --warmup 0 --warmup-ms 0 --ns 10m --res 1920x1080 > $OUT/r/ncu_$v.csv 2>$OUT/r/ncu_$v.err; echo "ncu $v rc $?"
  python3 .devcarry/ncu_sum.py $OUT/r/ncu_$v.csv 25 > $OUT/r/ncu_${v}_sum.txt; cat $OUT/r/ncu_${v}_sum.txt
done
cd $OUT && rm -f r/*.csv && tar czf all.tgz r && rm -rf r
