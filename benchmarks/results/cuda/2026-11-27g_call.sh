source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -k -f .devcarry/blas_test.xz && chmod +x .devcarry/blas_test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CB=$(python3 -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null)
echo "cublas dir: $CB"; ls $CB 2>&1 | head -5
ldconfig -p | grep -E "libcublas|libnvrtc" | head -4
export LD_LIBRARY_PATH=$CB:$LD_LIBRARY_PATH
mkdir -p $OUT/r
RUST3R_TEST_BACKEND=cuda timeout 120 .devcarry/blas_test --nocapture > $OUT/r/blas_test.txt 2>&1; echo "blas test rc $?"; grep -E "test |worst|panicked|result" $OUT/r/blas_test.txt | head -30
# Parity of the tiny model on CUDA, binary32 (TF32 off): cuBLAS vs CubeCL's kernels.
for cb in 1 0; do
  RUST3R_CUDA_TF32=0 RUST3R_CUBLAS=$cb timeout 120 $R mast3r-infer --backend cuda --checkpoint .devcarry/fx/tiny_mast3r.pth --inputs .devcarry/fx/inputs.safetensors --out /tmp/par_$cb.safetensors > $OUT/r/par_$cb.txt 2>&1; echo "infer cublas=$cb rc $?"; tail -2 $OUT/r/par_$cb.txt
done
python3 - <<'PY' > $OUT/r/par_cmp.txt 2>&1
from safetensors.numpy import load_file
a=load_file('/tmp/par_1.safetensors'); b=load_file('/tmp/par_0.safetensors')
worst=0
for k in sorted(b):
    x=a[k].astype('float64'); y=b[k].astype('float64'); r=abs(x-y).max()/max(abs(y).max(),1e-30)
    worst=max(worst,r)
    if r>1e-5: print('BIG', k, r)
print('tensors', len(b), 'worst rel diff cublas vs cubecl', worst)
PY
cat $OUT/r/par_cmp.txt | tail -5
split -b 15M /tmp/par_1.safetensors $OUT/r/par_cublas.part_
for run in 1 2; do for p in f32 f16; do for cb in 1 0; do
  RUST3R_CUBLAS=$cb timeout 150 $R bench mast3r --backend cuda --size full --precision $p --iters 10 --warmup 3 --graph --json $OUT/r/m_${p}_cb${cb}_$run.json > $OUT/r/m_${p}_cb${cb}_$run.txt 2>&1; echo "rust3r $p cublas=$cb run $run rc $?"; grep -E "median|replay:|peak" $OUT/r/m_${p}_cb${cb}_$run.txt
done
  tp=$p; [ $p = f32 ] && tp=tf32
  timeout 60 python3 benchmarks/mast3r_torch.py --size full --precision $tp --json $OUT/r/t_${tp}_$run.json > $OUT/r/t_${tp}_$run.txt 2>&1; echo "torch $tp run $run rc $?"; grep -iE "mono|pair|encoder" $OUT/r/t_${tp}_$run.txt | tail -3
done; done
cd $OUT && tar czf all.tgz r --exclude='par_cublas.part_*' && mv r/par_cublas.part_* . && rm -rf r
