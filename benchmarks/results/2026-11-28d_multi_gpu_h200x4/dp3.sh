source .devcarry10/dp.sh
# #27 after the batch scaling rules (fa591af): the 30k schedule's views on 1, 2, 4 GPUs, default --steps (30000 / batch).
t() { local name=$1; shift; local st=$(date +%s%N); timeout ${TL:-250} $R train $D --out /tmp/o/$name --backend cuda "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc $? $(( ($(date +%s%N) - st) / 1000000 )) ms: $(grep -E "done:|PSNR|psnr" $OUT/r/$name.txt | tail -2 | tr '\n' ' ' | cut -c1-300)"; cp /tmp/o/$name/eval.json $OUT/r/eval_$name.json 2>/dev/null; }
mkdir -p /tmp/o
t r4 --gpus 4 --checkpoint-every 0
t r2 --gpus 2 --checkpoint-every 0
t r1 --checkpoint-every 0
cd $OUT && tar czf dp3.tgz r && rm -rf r
