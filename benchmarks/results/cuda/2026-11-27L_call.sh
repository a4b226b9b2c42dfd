for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp/xdg CUBECL_CACHE_DIR=/tmp/cubecl; mkdir -p $XDG_RUNTIME_DIR
for v in K L; do xz -d -k -f .devcarry/rust3r_$v.xz && chmod +x .devcarry/rust3r_$v; done
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
G="--npz $NPZ --iters 9 --warmup 2 --ns base,1m,4m,10m --res 648x420,1920x1080"
(cd .devcarry/gs && LIMIT=150 bash bench/gsplat/device.sh > $OUT/r/gsplat_setup.txt 2>&1; export PYTHONPATH=/tmp/site; timeout 200 python3 bench/gsplat/raster_bench.py --ns base,1m,4m,10m --res 648x420,1920x1080 --packed 0 --no-ref --json $OUT/r/gsplat_raster.json > $OUT/r/gsplat_raster.txt 2>&1); echo "gsplat rc $?"; tail -9 $OUT/r/gsplat_raster.txt
for b in cuda wgpu; do for v in K L; do
  timeout 140 .devcarry/rust3r_$v bench raster --backend $b $G --json $OUT/r/raster_${b}_$v.json > $OUT/r/raster_${b}_$v.txt 2>&1; echo "$b $v rc $?"; grep "^| [0-9]" $OUT/r/raster_${b}_$v.txt
done; done
for b in cuda wgpu; do
  RUST3R_PROFILE=device timeout 60 .devcarry/rust3r_L bench raster --backend $b --npz $NPZ --iters 5 --warmup 1 --warmup-ms 1500 --ns base,10m --res 1920x1080 > $OUT/r/profdev_${b}_L.txt 2>&1; echo "== profile $b L"; grep -i "^profile\|fwd" $OUT/r/profdev_${b}_L.txt
done
cd $OUT && tar czf all.tgz r && rm -rf r
