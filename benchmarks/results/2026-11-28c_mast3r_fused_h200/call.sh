set -uo pipefail
mkdir -p /tmp/r3 $OUT/r
xz -dc .devcarry7/rust3r.xz > /tmp/r3/new && chmod +x /tmp/r3/new
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
F=.devcarry7/fx
for p in f32 f16; do
  tf=1; [ $p = f32 ] && tf=0
  RUST3R_CUDA_TF32=$tf timeout 120 /tmp/r3/new mast3r-infer --backend cuda --precision $p --checkpoint $F/tiny_mast3r.pth --inputs $F/inputs.safetensors --out $OUT/r/infer_$p.safetensors > $OUT/r/infer_$p.log 2>&1; echo "infer $p rc $?"
done
RUST3R_CUDA_TF32=1 timeout 120 /tmp/r3/new mast3r-infer --backend cuda --precision f32 --checkpoint $F/tiny_mast3r.pth --inputs $F/inputs.safetensors --out $OUT/r/infer_tf32.safetensors > $OUT/r/infer_tf32.log 2>&1; echo "infer tf32 rc $?"
for p in f32 f16 tf32; do [ -f $OUT/r/infer_$p.safetensors ] && python3 benchmarks/mast3r_torch.py --compare $OUT/r/infer_$p.safetensors --reference $F/outputs.safetensors 2>&1 | head -4 | cut -c1-400; done
rm -f $OUT/r/*.safetensors
bench() { timeout 120 /tmp/r3/$1 bench mast3r --backend cuda --size full --precision $2 --iters 20 --warmup 5 --graph --json $OUT/r/bench_$1_$2_$3.json > $OUT/r/bench_$1_$2_$3.txt 2>&1; echo "bench $1 $2 $3 rc $?"; }
bench new f32 1; bench new f16 1
timeout 150 python3 benchmarks/mast3r_torch.py --size full --precision tf32 --json $OUT/r/torch_tf32_1.json > $OUT/r/torch_tf32_1.txt 2>&1; echo "torch rc $?"
bench new f32 2; bench new f16 2
python3 - <<'PY'
import json,glob,os
for f in sorted(glob.glob(os.environ["OUT"]+"/r/*.json")):
    j=json.load(open(f))
    def walk(d,pre=""):
        for k,v in d.items():
            if isinstance(v,dict):
                if "median_ms" in v: print(os.path.basename(f),pre+k,round(v["median_ms"],2))
                else: walk(v,pre+k+".")
    walk(j)
PY
