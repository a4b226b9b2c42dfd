source .devcarry/prelude.sh >/dev/null 2>&1
xz -d -k -f .devcarry/rust3r_prev.xz && chmod +x .devcarry/rust3r_prev
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
slam() { # name binary cublas frames
  RUST3R_CUBLAS=$3 RUST_LOG=warn timeout 150 $2 slam .devcarry/rk --out /tmp/$1 --mode mono --checkpoint .devcarry/fx/tiny_mast3r.pth --backend cuda --max-frames $4 > $OUT/r/slam_$1.txt 2>&1; echo "$1 rc $?"; grep -E "frames in|pair tracking|panicked|status 700" $OUT/r/slam_$1.txt | head -4
  python3 -c "
import math
rows=[l.split() for l in open('/tmp/$1/trajectory.txt') if not l.startswith('#')]
print(len(rows),'poses; all finite:', all(math.isfinite(float(v)) for r in rows for v in r))" 2>&1 | tail -1
}
slam fixed_cb1 $R 1 40
slam fixed_cb0 $R 0 40
python3 - <<'PY'
import numpy as np
a=np.loadtxt('/tmp/fixed_cb1/trajectory.txt'); b=np.loadtxt('/tmp/fixed_cb0/trajectory.txt')
print('trajectory cublas vs cubecl: max |diff| of the first 3 poses', abs(a[:3]-b[:3]).max(), 'all', abs(a-b).max())
PY
CS=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
echo "sanitizer: $CS"
[ -n "$CS" ] && RUST3R_CUBLAS=1 timeout 240 $CS --tool memcheck --print-limit 5 .devcarry/rust3r_prev slam .devcarry/rk --out /tmp/prev --mode mono --checkpoint .devcarry/fx/tiny_mast3r.pth --backend cuda --max-frames 2 > $OUT/r/sanitizer_prev.txt 2>&1; echo "sanitizer prev rc $?"; grep -E "Invalid|Address|is out of bounds|by thread|kernel|ERROR SUMMARY" $OUT/r/sanitizer_prev.txt | head -12
cd $OUT && tar czf all.tgz r && rm -rf r
