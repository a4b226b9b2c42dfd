source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
D=.devcarry/gs/shared/data
tr() { # name, scene, extra args
  s=$(date +%s); timeout 140 $R train $D/$2 --out /tmp/$1 --steps 7000 --eval-at 2000 --checkpoint-every 0 --backend cuda ${@:3} > $OUT/r/train_$1.txt 2>&1; echo "$1 rc $? $(( $(date +%s)-s ))s"
  cp /tmp/$1/eval.json $OUT/r/eval_$1.json 2>/dev/null; grep "held-out\|done" $OUT/r/train_$1.txt | tail -3
}
tr statuette_bf16 statuette
tr statuette_sh8 statuette --adam-moments sh8
tr fox_sh8 fox --adam-moments sh8
tr fox_bf16 fox
cd $OUT && tar czf all.tgz r
