#!/usr/bin/env bash
# #24 item 6, encode ahead (commit bb30300): one CUDA binary (.dev/bin/new.xz), the default
# (decode ahead + encode ahead) against `encode_ahead: false` (decode ahead only), f32 and f16,
# alternating, twice; then depth pairs with each. Run from the repository root on the device.
set -uo pipefail
source benchmarks/slam_mono_runs.sh
mkdir -p /tmp/r3
xz -dc .dev/bin/new.xz > /tmp/r3/new; chmod +x /tmp/r3/new
printf 'encode_ahead: false\n' > /tmp/r3/off.yaml
echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
export KEEP_LOGS=1
for rep in 1 2; do
  slam_mono_run /tmp/r3/new on_f32 --gpu-tracking --timing 20
  slam_mono_run /tmp/r3/new off_f32 --gpu-tracking --timing 20 --config /tmp/r3/off.yaml
  slam_mono_run /tmp/r3/new on_f16 --gpu-tracking --timing 20 --precision f16
  slam_mono_run /tmp/r3/new off_f16 --gpu-tracking --timing 20 --precision f16 --config /tmp/r3/off.yaml
done
slam_mono_run /tmp/r3/new on_depth --gpu-tracking
slam_mono_run /tmp/r3/new off_depth --gpu-tracking --config /tmp/r3/off.yaml
cd $OUT && tar cf logs.tar logs && rm -rf logs
