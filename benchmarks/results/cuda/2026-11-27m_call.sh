source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
for cb in 1 0; do
  RUST3R_CUBLAS=$cb RUST_LOG=warn timeout 200 $R slam .devcarry/rk --out /tmp/s$cb --mode mono --checkpoint .devcarry/fx/tiny_mast3r.pth --backend cuda --max-frames 40 > $OUT/r/slam_cb$cb.txt 2>&1; echo "slam cublas=$cb rc $?"; tail -8 $OUT/r/slam_cb$cb.txt
  cp /tmp/s$cb/trajectory.txt $OUT/r/traj_cb$cb.txt 2>/dev/null
  python3 -c "
import math
rows=[l.split() for l in open('/tmp/s$cb/trajectory.txt') if not l.startswith('#')]
print(len(rows),'poses; all finite:', all(math.isfinite(float(v)) for r in rows for v in r))"
done
cd $OUT && tar czf all.tgz r && rm -rf r
