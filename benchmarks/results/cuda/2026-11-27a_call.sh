source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for p in f32 f16; do
  timeout 170 $R bench mast3r --backend cuda --size full --precision $p --iters 10 --warmup 3 --graph --json $OUT/r/m_$p.json > $OUT/r/m_$p.txt 2>&1; echo "rust3r $p rc $?"; grep -E "median|replay|peak" $OUT/r/m_$p.txt
  tp=$p; [ $p = f32 ] && tp=tf32
  timeout 90 python3 benchmarks/mast3r_torch.py --size full --precision $tp --json $OUT/r/t_$tp.json > $OUT/r/t_$tp.txt 2>&1; echo "torch $tp rc $?"; grep -iE "mono|pair|encoder" $OUT/r/t_$tp.txt | tail -4
done
RUST3R_PROFILE=1 timeout 120 $R bench raster --backend cuda --npz $NPZ --iters 7 --warmup 2 --ns 1m,4m --res 1920x1080 > $OUT/r/prof_cuda.txt 2>&1; echo "prof rc $?"
grep -E "^\||fwd|bwd" $OUT/r/prof_cuda.txt | head -60
tar czf $OUT/all.tgz -C $OUT r
