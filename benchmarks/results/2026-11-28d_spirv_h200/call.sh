set -uo pipefail
# #26: CubeCL's SPIR-V compiler (cooperative matrices) against the WGSL path, same GPU, one call.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json NCCL_NVLS_ENABLE=0
mkdir -p /tmp/r3 $OUT/r
xz -dc .devcarry8/rust3r.xz > /tmp/r3/wgsl && xz -dc .devcarry9/spv.xz > /tmp/r3/spv && chmod +x /tmp/r3/*
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
RUST_LOG=cubecl_wgpu=debug timeout 60 /tmp/r3/spv info 2>&1 | grep -i -E "spirv|cooperative|runtime|H200" | head -8
for b in spv wgsl; do for p in f32 f16; do
  echo "== net $b $p"; timeout 200 /tmp/r3/$b bench mast3r --backend wgpu --size full --precision $p --iters 10 --warmup 2 2>&1 | grep -E "median|error|Error|panick" | head -5
done; done
for b in spv wgsl spv; do
  echo "== raster $b"
  timeout 150 /tmp/r3/$b bench raster --backend wgpu --npz .devcarry9/test_garden.npz --iters 9 --warmup 2 --ns base,1m,4m,10m --res 648x420,1920x1080 --json $OUT/r/raster_$b.json 2>&1 | grep -v "^\s*$" | tail -12
done
