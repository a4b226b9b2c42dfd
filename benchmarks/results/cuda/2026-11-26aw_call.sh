source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
L=.devcarry/gs/shared/data/lego
for s in 45 42 43; do timeout 100 $R train $L --out /tmp/l$s --steps 7000 --eval-at 3000 --checkpoint-every 0 --backend cuda --seed $s > $OUT/r/train_fused_s$s.txt 2>&1; echo "seed $s rc $?"; grep "step 7000\|done" $OUT/r/train_fused_s$s.txt; cp /tmp/l$s/eval.json $OUT/r/eval_fused_s$s.json; done
