source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
run() { # name, env..., precision
  env $2 RUST_LOG=warn timeout 120 $R mast3r-infer --backend cuda --precision $3 --checkpoint .devcarry/fx/tiny_mast3r.pth --inputs .devcarry/fx/inputs.safetensors --out /tmp/$1.safetensors > $OUT/r/infer_$1.txt 2>&1; echo "$1 rc $?"; tail -1 $OUT/r/infer_$1.txt
}
run cublas_f32 "RUST3R_CUDA_TF32=0 RUST3R_CUBLAS=1" f32
run cubecl_f32 "RUST3R_CUDA_TF32=0 RUST3R_CUBLAS=0" f32
run cublas_f16 "RUST3R_CUBLAS=1" f16
run cubecl_f16 "RUST3R_CUBLAS=0" f16
run cublas_tf32 "RUST3R_CUBLAS=1" f32
cat > /tmp/cmp.py <<'PY'
import sys
from safetensors.numpy import load_file
ref=load_file('.devcarry/fx/outputs.safetensors')
for name in sys.argv[1:]:
    out=load_file(f'/tmp/{name}.safetensors')
    worst=(0,None); missing=[k for k in ref if k not in out]
    for k in ref:
        if k not in out: continue
        y=ref[k].astype('float64'); x=out[k].astype('float64')
        if x.shape!=y.shape: print(name,'SHAPE',k,x.shape,y.shape); continue
        r=abs(x-y).max()/max(abs(y).max(),1e-30)
        if r>worst[0]: worst=(r,k)
    print(f'{name}: {len(ref)-len(missing)} of {len(ref)} tensors, worst max|diff|/max|ref| {worst[0]:.3e} ({worst[1]}), missing {len(missing)}')
PY
python3 /tmp/cmp.py cublas_f32 cubecl_f32 cublas_f16 cubecl_f16 cublas_tf32 2>&1 | tee $OUT/r/parity.txt
cd $OUT && tar czf all.tgz r && rm -rf r
