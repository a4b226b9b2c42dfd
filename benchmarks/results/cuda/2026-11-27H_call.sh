for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp/xdg CUBECL_CACHE_DIR=/tmp/cubecl; mkdir -p $XDG_RUNTIME_DIR
for v in new H; do xz -d -k -f .devcarry/rust3r_$v.xz && chmod +x .devcarry/rust3r_$v; done
exec > >(tee $OUT/log.txt) 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
G="--npz $NPZ --iters 9 --warmup 2 --ns base,1m,4m,10m --res 648x420,1920x1080"
for b in cuda wgpu; do for v in new H; do
  timeout 140 .devcarry/rust3r_$v bench raster --backend $b $G --json $OUT/r/raster_${b}_$v.json > $OUT/r/raster_${b}_$v.txt 2>&1; echo "$b $v rc $?"; grep "^| [0-9]" $OUT/r/raster_${b}_$v.txt
done; done
for b in cuda wgpu; do for v in new H; do
  RUST3R_PROFILE=device timeout 60 .devcarry/rust3r_$v bench raster --backend $b --npz $NPZ --iters 5 --warmup 1 --warmup-ms 1500 --ns base,10m --res 1920x1080 > $OUT/r/profdev_${b}_$v.txt 2>&1; echo "== profile $b $v"; grep -i "^profile\|fwd\|bwd" $OUT/r/profdev_${b}_$v.txt
done; done
cd $OUT && tar czf all.tgz r && rm -rf r
