source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -k -f .devcarry/blas_test.xz && chmod +x .devcarry/blas_test
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldconfig -p | grep -E "libcublas" | head -3
mkdir -p $OUT/r
RUST3R_TEST_BACKEND=cuda RUST_LOG=warn timeout 120 .devcarry/blas_test --nocapture --test-threads 1 > $OUT/r/blas_test.txt 2>&1; echo "blas test rc $?"; grep -E "^test |panicked|result|rror" $OUT/r/blas_test.txt | head -30
for run in 1 2; do for p in f32 f16; do for cb in 1 0; do
  [ $run = 2 ] && [ $cb = 0 ] && continue
  RUST_LOG=warn RUST3R_CUBLAS=$cb timeout 150 $R bench mast3r --backend cuda --size full --precision $p --iters 10 --warmup 3 --graph --json $OUT/r/m_${p}_cb${cb}_$run.json > $OUT/r/m_${p}_cb${cb}_$run.txt 2>&1; echo "rust3r $p cublas=$cb run $run rc $?"; grep -E "median|replay:|peak|WARN|warn" $OUT/r/m_${p}_cb${cb}_$run.txt | head -12
done
  tp=$p; [ $p = f32 ] && tp=tf32
  timeout 60 python3 benchmarks/mast3r_torch.py --size full --precision $tp --json $OUT/r/t_${tp}_$run.json > $OUT/r/t_${tp}_$run.txt 2>&1; echo "torch $tp run $run rc $?"; grep -iE "mono|pair|encoder" $OUT/r/t_${tp}_$run.txt | tail -3
done; done
cd $OUT && tar czf all.tgz r && rm -rf r
