#!/usr/bin/env bash
# The new row kernels' subgroup path through Vulkan (WGSL; lavapipe has no subgroups, so only
# the tree ran in the tests): the fixture through `mast3r-infer --backend wgpu` in binary32 and
# f16 against upstream-made outputs, and the full network's timing through Vulkan.
# Carry: .gl (libvulkan1 deb), .dev/bin/new.xz, .dev/fx.
set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p /tmp/r3 $OUT/v
xz -dc .dev/bin/new.xz > /tmp/r3/new && chmod +x /tmp/r3/new
/tmp/r3/new info 2>&1 | grep -iE "vulkan|subgroups|default" | head -4
F=.dev/fx
for p in f32 f16; do
  timeout 150 /tmp/r3/new mast3r-infer --backend wgpu --precision $p --checkpoint $F/tiny_mast3r.pth --inputs $F/inputs.safetensors --out $OUT/v/infer_$p.safetensors > $OUT/v/infer_$p.log 2>&1; echo "infer wgpu $p rc $?"
  [ -f $OUT/v/infer_$p.safetensors ] && python3 benchmarks/mast3r_torch.py --compare $OUT/v/infer_$p.safetensors --reference $F/outputs.safetensors 2>&1 | head -2 | cut -c1-300
done
rm -f $OUT/v/*.safetensors
for p in f32 f16; do timeout 150 /tmp/r3/new bench mast3r --backend wgpu --size full --precision $p --iters 5 --warmup 2 > $OUT/v/bench_wgpu_$p.txt 2>&1; echo "bench wgpu $p rc $?"; grep -E "pair_rp|pair " $OUT/v/bench_wgpu_$p.txt; done
