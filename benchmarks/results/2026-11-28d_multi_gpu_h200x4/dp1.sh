source .devcarry10/dp.sh
t() { local name=$1; shift; local st=$(date +%s%N); timeout ${TL:-150} $R train $D --out /tmp/o/$name --backend cuda "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc $? $(( ($(date +%s%N) - st) / 1000000 )) ms: $(grep -E "done:|PSNR|psnr" $OUT/r/$name.txt | tail -2 | tr '\n' ' ' | cut -c1-300)"; }
mkdir -p /tmp/o
t eq1 --batch 2 --steps 300 --deterministic --eval-at "" --checkpoint-every 0
t eq2 --gpus 2 --steps 300 --deterministic --eval-at "" --checkpoint-every 0
cmp /tmp/o/eq1/splats.ply /tmp/o/eq2/splats.ply && echo "EQUAL 1gpu-batch2 vs 2gpus"
ls /tmp/o/eq1 | head
( timeout 150 $R train $D --out /tmp/o/mp --backend cuda --adapter 0 --rank 0 --world-size 2 --rendezvous 127.0.0.1:29500 --steps 300 --deterministic --eval-at "" --checkpoint-every 0 > $OUT/r/mp0.txt 2>&1; echo "mp0 rc $?" ) &
sleep 1
timeout 150 $R train $D --out /tmp/o/mp1 --backend cuda --adapter 1 --rank 1 --world-size 2 --rendezvous 127.0.0.1:29500 --steps 300 --deterministic --eval-at "" --checkpoint-every 0 > $OUT/r/mp1.txt 2>&1; echo "mp1 rc $?"; wait
cmp /tmp/o/eq2/splats.ply /tmp/o/mp/splats.ply && echo "EQUAL 2 processes vs 2gpus"
t s1 --batch 4 --steps 3000 --eval-at "" --checkpoint-every 0
t s2 --gpus 2 --batch 4 --steps 3000 --eval-at "" --checkpoint-every 0
t s4 --gpus 4 --batch 4 --steps 3000 --eval-at "" --checkpoint-every 0
t s4b --gpus 4 --batch 8 --steps 3000 --eval-at "" --checkpoint-every 0
cd $OUT && tar czf dp1.tgz r && rm -rf r
