#!/usr/bin/env bash
# Issue #22's benchmark on a GPU machine: `rust3r run` on the bundled redkitchen (500 frames,
# every 20th from frame 10 held out before SLAM) against gsplat 1.5.3 trained on the same frames
# with ground-truth poses and depth-initialised points (tools/gsplat_redkitchen.py), both scored
# on the held-out frames at poses interpolated between their neighbours'. Same resolution and
# step count on both sides. Runs from the repository root; expects
#   $RK          a 7-Scenes folder with frames 0-499 (../shared/data/redkitchen)
#   $RUST3R      the rust3r binary built with --features rust3r-cli/cuda
#   .ref/        the gsplat harness and wheel (../shared/bench/gsplat/README.md)
# and the jobs to run as arguments: gsplat:STEPS:DOWNSCALE:INIT, run:PRESET:STEPS[:extra flags],
# train:STEPS:DOWNSCALE:RUN (plain `rust3r train` on the `slam/` export of the earlier run job
# named RUN, e.g. run_quick_2000_noposerefinenoexposuredepthweight0, scored with --eval-scene on
# that run's held_out.json: the same held-out frames at SLAM's poses when RUN had no pose
# refinement).
set -uo pipefail
OUT=${OUT:-out/bench22}
mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ ! -d /tmp/site/gsplat ]; then
  (cd .ref && LIMIT=200 bash bench/gsplat/device.sh) 2>&1 | grep -v "^$" | tail -3
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

peak_mem() { # runs "$@" while sampling the GPU's used memory; prints the peak in MiB
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/mem.log" 2>/dev/null &
  local smi=$!
  "$@"
  local rc=$?
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  echo "peak GPU memory: $(sort -n "$OUT/mem.log" | tail -1) MiB (nvidia-smi, whole device)"
  return $rc
}

for job in "$@"; do
  echo "== $job ($(( $(date +%s) - T0 )) s)"
  IFS=: read -r kind a b c d <<<"$job"
  case "$kind" in
    gsplat)
      peak_mem python3 tools/gsplat_redkitchen.py --data "$RK" --harness .ref/bench/gsplat \
        --steps "$a" --downscale "$b" --init-n "$c" --json "$OUT/gsplat_${a}_${b}.json" ;;
    run)
      name="run_${a}_${b}${c:+_$(echo "$c" | tr -d ' -')}"
      # shellcheck disable=SC2086
      t=$(date +%s.%N)
      peak_mem "$RUST3R" run "$RK" --backend cuda --out "$OUT/$name" --preset "$a" --steps "$b" \
        --hold-out 20 $c 2>&1 | grep -v "^\s*$" | tail -14
      echo "wall $(python3 -c "import time; print(round(time.time() - $t, 1))") s" ;;
    train)
      t=$(date +%s.%N)
      peak_mem "$RUST3R" train "$OUT/$c/slam/transforms.json" --eval-scene "$OUT/$c/held_out.json" \
        --backend cuda --out "$OUT/train_${a}_${b}" --steps "$a" --downscale "$b" \
        --background black 2>&1 | grep -v "^\s*$" | tail -6
      echo "wall $(python3 -c "import time; print(round(time.time() - $t, 1))") s" ;;
    *) echo "unknown job $job" ;;
  esac
done
echo "== total $(( $(date +%s) - T0 )) s"
