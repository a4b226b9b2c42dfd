source .devcarry10/dp.sh
t() { local name=$1; shift; local st=$(date +%s%N); timeout ${TL:-250} $R train $D --out /tmp/o/$name --backend cuda "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc $? $(( ($(date +%s%N) - st) / 1000000 )) ms: $(grep -E "done:|PSNR|psnr" $OUT/r/$name.txt | tail -2 | tr '\n' ' ' | cut -c1-300)"; cp /tmp/o/$name/eval.json $OUT/r/eval_$name.json 2>/dev/null; }
mkdir -p /tmp/o
t q4 --gpus 4 --batch 4 --steps 7500 --checkpoint-every 0
t q2 --gpus 2 --batch 2 --steps 15000 --checkpoint-every 0
t q1 --steps 30000 --checkpoint-every 0
cd $OUT && tar czf dp2.tgz r && rm -rf r
