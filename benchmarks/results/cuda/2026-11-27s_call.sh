source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -k -f .devcarry/blas_test.xz && chmod +x .devcarry/blas_test
mkdir -p $OUT/r
RUST3R_TEST_BACKEND=cuda timeout 120 .devcarry/blas_test --nocapture --test-threads 1 > $OUT/r/blas_test.txt 2>&1; echo "blas test rc $?"; grep -E "^test |result|panicked" $OUT/r/blas_test.txt
for p in f32 f16; do RUST_LOG=warn timeout 150 $R bench mast3r --backend cuda --size full --precision $p --iters 10 --warmup 3 --graph --json $OUT/r/m_$p.json > $OUT/r/m_$p.txt 2>&1; echo "$p rc $?"; grep -E "mono_rp|pair_rp|replay:|peak" $OUT/r/m_$p.txt; done
timeout 60 python3 benchmarks/mast3r_torch.py --size full --precision tf32 --json $OUT/r/t_tf32.json > $OUT/r/t_tf32.txt 2>&1; echo "torch rc $?"; grep -iE "mono|pair" $OUT/r/t_tf32.txt | tail -2
RUST_LOG=warn timeout 150 $R slam .devcarry/rk --out /tmp/s --mode mono --checkpoint .devcarry/fx/tiny_mast3r.pth --backend cuda --max-frames 10 > $OUT/r/slam.txt 2>&1; echo "slam rc $?"; grep -E "frames in|pair tracking|panicked" $OUT/r/slam.txt
cd $OUT && tar czf all.tgz r && rm -rf r
