#!/usr/bin/env bash
# The new network kernels (subgroup reductions, registers, im2col) on CUDA against the fixture
# made by upstream-equivalent code: binary32 (TF32 off), f16, TF32, then PyTorch's TF32 timing.
# Carry: .dev/bin/new.xz, .dev/fx (tiny_mast3r.pth, inputs/outputs.safetensors, config.json).
set -uo pipefail
mkdir -p /tmp/r3 $OUT/p
xz -dc .dev/bin/new.xz > /tmp/r3/new && chmod +x /tmp/r3/new
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
F=.dev/fx
run_infer() { RUST3R_CUDA_TF32=$2 timeout 120 /tmp/r3/new mast3r-infer --backend cuda --precision $1 --checkpoint $F/tiny_mast3r.pth --inputs $F/inputs.safetensors --out $OUT/p/infer_$3.safetensors > $OUT/p/infer_$3.log 2>&1; echo "infer $3 rc $?"; }
run_infer f32 0 f32; run_infer f16 1 f16; run_infer f32 1 tf32
for p in f32 f16 tf32; do [ -f $OUT/p/infer_$p.safetensors ] && python3 benchmarks/mast3r_torch.py --compare $OUT/p/infer_$p.safetensors --reference $F/outputs.safetensors 2>&1 | head -4 | cut -c1-400; done
rm -f $OUT/p/*.safetensors
timeout 150 python3 benchmarks/mast3r_torch.py --size full --precision tf32 --json $OUT/p/torch_tf32.json > $OUT/p/torch_tf32.txt 2>&1; echo "torch rc $?"; tail -6 $OUT/p/torch_tf32.txt
