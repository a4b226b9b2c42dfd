#!/usr/bin/env bash
# Sourced by the device scripts of `rust3r bench slam-mono` (benchmarks/results/*/call.sh):
#   slam_mono_run BIN NAME [bench args...]
# runs BIN's `bench slam-mono` on $DATA (default .dev/rk) for $FRAMES frames (default 300) with a
# trace log, prints the FPS lines, errors, the per-phase profile's main rows and the pair
# tracker's mean time and matching time; keeps the JSON and the profile in $OUT/logs as
# rN_NAME.json / rN_NAME_profile.txt and the trace log as rN_NAME.err (removed unless $KEEP_LOGS).
slam_mono_k=0
slam_mono_run() {
  local bin=$1 name=$2; shift 2
  slam_mono_k=$((slam_mono_k + 1))
  local base=$OUT/logs/r${slam_mono_k}_${name}
  mkdir -p "$OUT/logs"
  echo "== run $slam_mono_k: $name ($*)"
  RUST_LOG=warn,rust3r=info,rust3r_slam=trace,rust3r_mast3r=trace timeout 150 "$bin" bench slam-mono "${DATA:-.dev/rk}" \
    --backend cuda --frames "${FRAMES:-300}" "$@" --json "$base.json" 2> "$base.err" | grep -E "FPS|time:"
  grep -iE "panic|error" "$base.err" | head -3
  bash benchmarks/slam_phase_profile.sh "$base.err" > "${base}_profile.txt" 2>&1
  grep -E "profile (decode|frame|track|overlap|map)|readback|convert" "${base}_profile.txt"
  sed 's/\x1b\[[0-9;]*m//g' "$base.err" | grep "pair tracked on the GPU" | awk '{for(i=1;i<=NF;i++){if($i=="in")a+=$(i+1); if($i=="matching")m+=$(i+1)} n++} END{if(n) printf "  tracked %.2f ms, matching %.2f ms (%d pairs)\n", a/n, m/n, n}'
  if [ -z "${KEEP_LOGS:-}" ]; then rm -f "$base.err"; else xz -3 "$base.err"; fi
}
