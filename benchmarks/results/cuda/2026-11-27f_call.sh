source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -k -f .devcarry/rust3r_old.xz && chmod +x .devcarry/rust3r_old
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
G="--npz $NPZ --iters 9 --warmup 2 --ns base,1m,4m,10m --res 648x420,1920x1080"
for cfg in "new cuda" "old cuda" "new wgpu" "old wgpu"; do set -- $cfg
  B=$R; [ $1 = old ] && B=$PWD/.devcarry/rust3r_old
  timeout 150 $B bench raster --backend $2 $G --json $OUT/r/raster_$1_$2.json > $OUT/r/raster_$1_$2.txt 2>&1; echo "$cfg rc $?"; grep "^| [0-9]" $OUT/r/raster_$1_$2.txt
done
(cd .devcarry/gs && LIMIT=150 bash bench/gsplat/device.sh > $OUT/r/gsplat_setup.txt 2>&1; export PYTHONPATH=/tmp/site; timeout 220 python3 bench/gsplat/raster_bench.py --ns base,1m,4m,10m --res 648x420,1920x1080 --packed 0 --no-ref --json $OUT/r/gsplat_raster.json > $OUT/r/gsplat_raster.txt 2>&1); echo "gsplat rc $?"; tail -12 $OUT/r/gsplat_raster.txt
cd $OUT && tar czf all.tgz r
