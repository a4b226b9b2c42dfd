source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
G="--npz $NPZ --iters 9 --warmup 2 --ns base,1m,4m,10m --res 648x420,1920x1080"
(cd .devcarry/gs && LIMIT=150 bash bench/gsplat/device.sh > $OUT/r/gsplat_setup.txt 2>&1; export PYTHONPATH=/tmp/site; timeout 200 python3 bench/gsplat/raster_bench.py --ns base,1m,4m,10m --res 648x420,1920x1080 --packed 0 --no-ref --json $OUT/r/gsplat_raster.json > $OUT/r/gsplat_raster.txt 2>&1); echo "gsplat rc $?"; tail -12 $OUT/r/gsplat_raster.txt
for b in cuda wgpu; do
  timeout 140 $R bench raster --backend $b $G --json $OUT/r/raster_$b.json > $OUT/r/raster_$b.txt 2>&1; echo "$b rc $?"; grep "^| [0-9]" $OUT/r/raster_$b.txt
done
cd $OUT && tar czf all.tgz r && rm -rf r
