#!/usr/bin/env bash
set -uo pipefail
mkdir -p /tmp/r3 $OUT/logs
xz -dc .dev/bin/new4.xz > /tmp/r3/new; chmod +x /tmp/r3/new
rm -rf /tmp/rk && cp -r .dev/rk /tmp/rk
echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
k=0
run() { local name=$1; shift; k=$((k+1)); local log=$OUT/logs/r${k}_${name}.err
  echo "== run $k: $name ($*)"
  RUST_LOG=warn,rust3r=info,rust3r_slam=trace,rust3r_mast3r=trace timeout 150 /tmp/r3/new bench slam-mono /tmp/rk \
    --backend cuda --frames 300 "$@" --json $OUT/logs/r${k}_${name}.json 2> $log | grep -E "FPS|time:"
  grep -iE "panic|error" $log | head -3
  bash benchmarks/slam_phase_profile.sh $log 2>&1 | grep -E "profile (decode|frame|track|overlap|map)|readback"
  sed 's/\x1b\[[0-9;]*m//g' $log | grep "pair tracked on the GPU" | awk '{for(i=1;i<=NF;i++){if($i=="in")a+=$(i+1); if($i=="matching")m+=$(i+1)} n++} END{printf "  tracked %.2f ms, matching %.2f ms (%d pairs)\n", a/n, m/n, n}'
}
run f16_ahead --gpu-tracking --timing 20 --precision f16
run f32_ahead --gpu-tracking --timing 20
run f16_noahead --gpu-tracking --timing 20 --precision f16 --config .dev/noahead.yaml
run f16_ahead --gpu-tracking --timing 20 --precision f16
cd $OUT && tar cJf logs.txz logs && rm -rf logs
