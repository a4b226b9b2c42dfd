source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
L=.devcarry/gs/shared/data/lego
st=$(date +%s); timeout 200 $R train $L --out /tmp/lego30k --steps 30000 --eval-at 7000 --checkpoint-every 0 --backend cuda > $OUT/r/train_lego30k.txt 2>&1; echo "rust3r 30k rc $? $(( $(date +%s)-st ))s"
cp /tmp/lego30k/eval.json $OUT/r/eval_lego30k.json; tail -c 700 $OUT/r/eval_lego30k.json; echo
(cd .devcarry/gs && LIMIT=360 OUT=$OUT/r bash bench/gsplat/device.sh train:30000:default+reset) > $OUT/r/gsplat_train30k.txt 2>&1; echo "gsplat rc $?"
grep -i "psnr\|train_s\|wall\|seconds\|JIT" $OUT/r/gsplat_train30k.txt | tail -8
cd $OUT && tar czf all.tgz r
