for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp/xdg CUBECL_CACHE_DIR=/tmp/cubecl; mkdir -p $XDG_RUNTIME_DIR
for v in old new; do xz -d -k -f .devcarry/rust3r_$v.xz && chmod +x .devcarry/rust3r_$v; done
exec > >(tee $OUT/log.txt) 2>&1
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for rep in 1 2; do for v in old new; do
  RUST3R_PROFILE=device timeout 60 .devcarry/rust3r_$v bench raster --backend wgpu --npz $NPZ --iters 5 --warmup 1 --warmup-ms 1500 --ns 1m,10m --res 648x420,1920x1080 > $OUT/profdev_wgpu_${v}_$rep.txt 2>&1; echo "== wgpu $v rep $rep"; grep -i "^profile\|fwd 4\|bwd 1\|^| [0-9]" $OUT/profdev_wgpu_${v}_$rep.txt
done; done
