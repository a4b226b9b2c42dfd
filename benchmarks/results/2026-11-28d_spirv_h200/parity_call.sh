set -uo pipefail
# #26: MASt3R parity through Vulkan with the SPIR-V compiler (binary 8e4fd74 built --features cuda,spirv) against upstream's fixture.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p /tmp/r3 $OUT/r && xz -dc .devcarry12/rust3r.xz > /tmp/r3/rust3r && chmod +x /tmp/r3/rust3r
F=.devcarry12
for p in f32 f16; do
  timeout 120 /tmp/r3/rust3r mast3r-infer --backend wgpu --precision $p --checkpoint $F/tiny_mast3r.pth --inputs $F/inputs.safetensors --out /tmp/infer_$p.safetensors > $OUT/r/infer_$p.log 2>&1; echo "infer wgpu(spirv) $p rc $?"; tail -2 $OUT/r/infer_$p.log
  python3 benchmarks/mast3r_torch.py --compare /tmp/infer_$p.safetensors --reference $F/outputs.safetensors 2>&1 | head -6 | cut -c1-400 | tee $OUT/r/compare_$p.txt
done
