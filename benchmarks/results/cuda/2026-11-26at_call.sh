source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
L=.devcarry/gs/shared/data/lego
tr() { # name, extra args
  s=$(date +%s); timeout 100 $R train $L --out /tmp/lego_$1 --steps 7000 --eval-at 3000 --checkpoint-every 0 ${@:2} > $OUT/r/train_$1.txt 2>&1; echo "$1 rc $? $(( $(date +%s)-s ))s"
  cp /tmp/lego_$1/eval.json $OUT/r/eval_$1.json 2>/dev/null; tail -2 $OUT/r/train_$1.txt
}
tr warm_sh8_s45 --backend cuda --adam-moments sh8 --seed 45
tr sh8_s42 --backend cuda --adam-moments sh8
tr bf16_s42 --backend cuda
tr sh8_s43 --backend cuda --adam-moments sh8 --seed 43
tr bf16_s43 --backend cuda --seed 43
tr bf16_s44 --backend cuda --seed 44
tr sh8_s44 --backend cuda --adam-moments sh8 --seed 44
(cd .devcarry/gs && LIMIT=200 OUT=$OUT/r bash bench/gsplat/device.sh train:7000:default+reset) > $OUT/r/gsplat_train.txt 2>&1; echo "gsplat rc $?"
grep "held-out" $OUT/r/gsplat_train.txt | tail -2
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for p in sh8 bf16; do timeout 90 $R bench train-step --backend cuda --npz $NPZ --ns 10m --res 1920x1080 --steps 5 --adam-moments $p > $OUT/r/step_$p.txt 2>&1; echo "step $p rc $?"; tail -1 $OUT/r/step_$p.txt; done
cd $OUT && tar czf all.tgz r
