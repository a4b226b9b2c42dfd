#!/usr/bin/env bash
# Issue #24 item 6 on the device: binaries A/B in one call (BINS="base new": .dev/bin/NAME.xz, the
# CUDA build of `rust3r`, xz -3; .dev/rk: redkitchen frames 0-149 with camera-intrinsics.txt, both
# carried), f32 and f16 with decoding ahead (the default), alternating, twice; then depth pairs on
# each (real geometry: ATE and loop closures). Trace logs kept (xz) for the timeline. Run from the
# repository root: `bash benchmarks/slam_mono_ab.sh`.
set -uo pipefail
source benchmarks/slam_mono_runs.sh
mkdir -p /tmp/r3
BINS=${BINS:-"base new"}
for b in $BINS; do xz -dc .dev/bin/$b.xz > /tmp/r3/$b; chmod +x /tmp/r3/$b; done
echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
export KEEP_LOGS=1
for rep in 1 2; do
  for b in $BINS; do
    slam_mono_run /tmp/r3/$b ${b}_f32 --gpu-tracking --timing 20
    slam_mono_run /tmp/r3/$b ${b}_f16 --gpu-tracking --timing 20 --precision f16
  done
done
for b in $BINS; do slam_mono_run /tmp/r3/$b ${b}_depth --gpu-tracking; done
cd $OUT && tar cf logs.tar logs && rm -rf logs
