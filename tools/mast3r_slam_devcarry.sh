#!/bin/bash
# Prepares .devcarry4/ (git-ignored): everything tools/mast3r_slam_fixture.py needs to run
# upstream's CUDA kernels on a GPU machine without network, and run.sh, which writes the
# fixtures to $OUT. Usage, from the repository root:
#   tools/mast3r_slam_devcarry.sh <MASt3R-SLAM checkout> <Eigen checkout (its thirdparty/eigen)> [redkitchen dir]
# then on the GPU machine (.devcarry4 carried): bash .devcarry4/run.sh
# Needs here: python3 with numpy and OpenCV (depth PNGs -> .npy), PyYAML and ninja installed.
set -euo pipefail
UP=${1:?MASt3R-SLAM checkout}
EIGEN=${2:?Eigen checkout}
DATA=${3:-../shared/data/redkitchen}
D=.devcarry4
rm -rf "$D"
mkdir -p "$D/MASt3R-SLAM/mast3r_slam/backend" "$D/MASt3R-SLAM/config" "$D/redkitchen" "$D/eigen" "$D/py" "$D/bin"
for m in config image geometry nonlinear_optimizer matching tracker global_opt; do
  cp "$UP/mast3r_slam/$m.py" "$D/MASt3R-SLAM/mast3r_slam/"
done
cp -r "$UP/mast3r_slam/backend/src" "$UP/mast3r_slam/backend/include" "$D/MASt3R-SLAM/mast3r_slam/backend/"
cp "$UP/config/base.yaml" "$D/MASt3R-SLAM/config/"
git -C "$UP" rev-parse HEAD > "$D/MASt3R-SLAM/REVISION" 2>/dev/null || true
cp -r "$EIGEN/Eigen" "$D/eigen/"
cp "$EIGEN/COPYING.MPL2" "$D/eigen/" 2>/dev/null || true
git -C "$EIGEN" rev-parse HEAD > "$D/eigen/REVISION" 2>/dev/null || true
python3 - "$DATA" "$D/redkitchen" <<'EOF'
import shutil, sys
import cv2
import numpy as np
src, dst = sys.argv[1:3]
for i in (0, 25, 30, 50, 75):  # the fixture's default --pair and --keyframes
    np.save(f"{dst}/frame-{i:06d}.depth.npy", cv2.imread(f"{src}/frame-{i:06d}.depth.png", cv2.IMREAD_UNCHANGED))
    shutil.copy(f"{src}/frame-{i:06d}.pose.txt", dst)
shutil.copy(f"{src}/camera-intrinsics.txt", dst)
EOF
# Pure-Python PyYAML (upstream's config.py imports yaml) and the ninja binary (cpp_extension).
cp -r "$(python3 -c 'import os, yaml; print(os.path.dirname(yaml.__file__))')" "$D/py/"
rm -f "$D"/py/yaml/_yaml*.so
cp "$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))')" "$D/bin/"
cat > "$D/run.sh" <<'EOF'
#!/bin/bash
# MASt3R-SLAM parity fixtures on a CUDA machine (tools/mast3r_slam_fixture.py, docs/guide.md).
# From the repository root with .devcarry4 carried: bash .devcarry4/run.sh
# Writes matching/tracking/backend.safetensors, config.yaml and run.log to $OUT.
# Needs python3 with torch (CUDA) and numpy, nvcc; brings ninja, PyYAML (pure Python), Eigen
# (MASt3R-SLAM's submodule commit), upstream's sources and the redkitchen frames' depth.
set -uo pipefail
cd "$(dirname "$0")/.."
C=$PWD/.devcarry4
OUT=${OUT:-/tmp/msfix_out}
mkdir -p "$OUT"
export PATH="$C/bin:$PATH"
export PYTHONPATH="$C/py${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nvcc --version | tail -2
  python3 -c "import torch, numpy, yaml; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'numpy', numpy.__version__)"
  python3 tools/mast3r_slam_fixture.py --upstream "$C/MASt3R-SLAM" --data "$C/redkitchen" \
    --out "$OUT" --backend cuda --eigen "$C/eigen" --build-dir /tmp/mast3r_slam_backends_cuda \
    --pieces matching,tracking,backend
  echo "exit $?"
} 2>&1 | grep -v "^\s*|" | tail -c 200000 > "$OUT/run.log"
tail -25 "$OUT/run.log"
ls -la "$OUT"
EOF
chmod +x "$D/run.sh"
du -sh "$D"
