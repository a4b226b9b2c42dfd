source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
G="--npz $NPZ --iters 9 --warmup 2 --ns base,1m,4m,10m --res 648x420,1920x1080"
(cd .devcarry/gs && LIMIT=150 bash bench/gsplat/device.sh > $OUT/r/gsplat_setup.txt 2>&1; export PYTHONPATH=/tmp/site; timeout 200 python3 bench/gsplat/raster_bench.py --ns base,1m,4m,10m --res 648x420,1920x1080 --packed 0 --no-ref --json $OUT/r/gsplat_raster.json > $OUT/r/gsplat_raster.txt 2>&1); echo "gsplat rc $?"; tail -9 $OUT/r/gsplat_raster.txt
for b in cuda wgpu; do for m in 1 0; do
  RUST3R_CHECKED_KERNELS=$m timeout 140 $R bench raster --backend $b $G --json $OUT/r/raster_${b}_checked$m.json > $OUT/r/raster_${b}_checked$m.txt 2>&1; echo "$b checked=$m rc $?"; grep "^| [0-9]" $OUT/r/raster_${b}_checked$m.txt
done; done
for b in cuda wgpu; do
  RUST3R_PROFILE=1 timeout 60 $R bench raster --backend $b --npz $NPZ --iters 5 --warmup 1 --ns 10m --res 1920x1080 > $OUT/r/prof_$b.txt 2>&1; echo "profile $b rc $?"; grep -i "profile\|fwd\|bwd" $OUT/r/prof_$b.txt | tail -30
done
cd $OUT && tar czf all.tgz r && rm -rf r
