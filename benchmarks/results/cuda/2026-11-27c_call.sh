source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for run in 1 2; do for p in f32 f16; do
  timeout 120 $R bench mast3r --backend cuda --size full --precision $p --iters 10 --warmup 3 --graph --json $OUT/r/m_${p}_$run.json > $OUT/r/m_${p}_$run.txt 2>&1; echo "rust3r $p run $run rc $?"; grep -E "median|replay:|peak" $OUT/r/m_${p}_$run.txt
  tp=$p; [ $p = f32 ] && tp=tf32
  timeout 60 python3 benchmarks/mast3r_torch.py --size full --precision $tp --json $OUT/r/t_${tp}_$run.json > $OUT/r/t_${tp}_$run.txt 2>&1; echo "torch $tp run $run rc $?"; grep -iE "mono|pair|encoder" $OUT/r/t_${tp}_$run.txt | tail -3
done; done
RUST3R_PROFILE=1 timeout 90 $R bench mast3r --backend cuda --size full --precision f32 --iters 5 --warmup 2 > $OUT/r/m_prof.txt 2>&1; grep profile $OUT/r/m_prof.txt
D=.devcarry/gs/shared/data
tr() { # name, scene, extra args
  s=$(date +%s); timeout 100 $R train $D/$2 --out /tmp/$1 --steps 7000 --eval-at 7000 --checkpoint-every 0 --backend cuda ${@:3} > $OUT/r/train_$1.txt 2>&1; echo "$1 rc $? $(( $(date +%s)-s ))s"
  cp /tmp/$1/eval.json $OUT/r/eval_$1.json 2>/dev/null; python3 -c "import json,sys; d=json.load(open('/tmp/$1/eval.json')); d=d[-1] if isinstance(d,list) else d; print({k:d.get(k) for k in ('step','psnr','ssim','num_splats')})" 2>&1 | tail -1
}
for s in 44 45 46; do tr fox_bf16_s$s fox --seed $s; tr fox_sh8_s$s fox --seed $s --adam-moments sh8; done
cd $OUT && tar czf all.tgz r
