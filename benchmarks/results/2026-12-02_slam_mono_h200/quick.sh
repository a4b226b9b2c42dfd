#!/usr/bin/env bash
set -uo pipefail
mkdir -p /tmp/r3 $OUT/logs
xz -dc .dev/bin/new.xz > /tmp/r3/new; chmod +x /tmp/r3/new
rm -rf /tmp/rk && cp -r .dev/rk /tmp/rk
echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
k=0
run() { local name=$1; shift; k=$((k+1)); local log=$OUT/logs/q${k}_${name}.err
  echo "== run $k: $name ($*)"
  RUST_LOG=warn,rust3r=info,rust3r_slam=trace,rust3r_mast3r=trace timeout 150 /tmp/r3/new bench slam-mono /tmp/rk \
    --backend cuda "$@" --json $OUT/logs/q${k}_${name}.json 2> $log | grep -E "FPS|time:"
  echo "rc $?"; grep -iE "panic|error" $log | head -5
  bash benchmarks/slam_phase_profile.sh $log 2>&1 | grep -E "profile|decode|pointmaps|retriev|query"
}
run ahead --frames 300 --gpu-tracking --timing 20
run noahead --frames 300 --gpu-tracking --timing 20 --config .dev/noahead.yaml
run depth --frames 300 --gpu-tracking
cd $OUT && tar cJf logs.txz logs && rm -rf logs
