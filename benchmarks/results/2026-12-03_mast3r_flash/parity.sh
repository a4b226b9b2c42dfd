#!/usr/bin/env bash
# The flash binary (.dev/bin/new.xz) against the fixture: binary32, f16, TF32. Carry .dev/bin/new.xz, .dev/fx.
set -uo pipefail
mkdir -p /tmp/r3 $OUT/r
xz -dc .dev/bin/new.xz > /tmp/r3/new && chmod +x /tmp/r3/new
F=.dev/fx
run_infer() { RUST3R_CUDA_TF32=$2 timeout 120 /tmp/r3/new mast3r-infer --backend cuda --precision $1 --checkpoint $F/tiny_mast3r.pth --inputs $F/inputs.safetensors --out $OUT/r/infer_$3.safetensors > $OUT/r/infer_$3.log 2>&1; echo "infer $3 rc $?"; grep -i -m2 "flash" $OUT/r/infer_$3.log; }
run_infer f32 0 f32; run_infer f16 1 f16; run_infer f32 1 tf32
for p in f32 f16 tf32; do [ -f $OUT/r/infer_$p.safetensors ] && python3 benchmarks/mast3r_torch.py --compare $OUT/r/infer_$p.safetensors --reference $F/outputs.safetensors 2>&1 | head -4 | cut -c1-400; done
rm -f $OUT/r/*.safetensors
