source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -f .devcarry/rust3r_old.xz && chmod +x .devcarry/rust3r_old
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for rep in 1 2; do for b in old new; do for m in bf16 sh8; do
  B=$R; [ $b = old ] && B=$PWD/.devcarry/rust3r_old
  timeout 60 $B bench train-step --backend cuda --npz $NPZ --ns 10m --res 1920x1080 --steps 5 --adam-moments $m > $OUT/r/step_${b}_${m}_$rep.txt 2>&1; echo "$b $m rc $? $(tail -1 $OUT/r/step_${b}_${m}_$rep.txt)"
done; done; done
timeout 60 $R bench train-step --backend cuda --npz $NPZ --ns 20m --res 1920x1080 --steps 3 --adam-moments sh8 > $OUT/r/step_new_sh8_20m.txt 2>&1; echo "20m sh8 rc $? $(tail -1 $OUT/r/step_new_sh8_20m.txt)"
