#!/usr/bin/env bash
# Issue #24's throughput and long-run figures on a GPU machine: `rust3r bench slam-mono` (the
# monocular MASt3R system end to end; the network with random weights of the released
# architecture and learned retrieval with a random head and 64k-word codebook run on every
# frame, the pointmaps come from depth + ground truth so tracking succeeds). Runs from the
# repository root; expects
#   $RK       a 7-Scenes folder (../shared/data/redkitchen, or a part of it)
#   $RUST3R   the rust3r binary built with --features rust3r-cli/cuda
# and the jobs as arguments: FRAMES:STRIDE[:extra flags], e.g. 300:1 5000:1:--report-every=1000
# (quote jobs whose flags have spaces). Issue #24 item 6, descriptors on the device against the old
# round trip, and the system on the network's own outputs (timing mode, a keyframe every 20 frames):
#   300:1:--gpu-tracking "300:1:--gpu-tracking --host-descriptors" \
#   "300:1:--gpu-tracking --timing 20" "300:1:--gpu-tracking --timing 20 --host-descriptors"
set -uo pipefail
OUT=${OUT:-out/slam_mono}
mkdir -p "$OUT"
echo "== $(hostname): $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for job in "$@"; do
  IFS=: read -r frames stride extra <<<"$job"
  name="slam_mono_${frames}_${stride}$(echo "${extra:-}" | tr -d ' =-')"
  echo "== $job"
  # shellcheck disable=SC2086
  "$RUST3R" bench slam-mono "$RK" --backend cuda --frames "$frames" --stride "$stride" \
    --json "$OUT/$name.json" ${extra:-} 2>&1 | grep -v " INFO " | tail -25
done
