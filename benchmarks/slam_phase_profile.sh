#!/usr/bin/env bash
# Per-phase means of a `rust3r bench slam-mono` (or `rust3r slam --mode mono`) run's debug trace:
# run it with
#   RUST_LOG=warn,rust3r=info,rust3r_slam=debug,rust3r_mast3r=trace rust3r bench slam-mono ... 2> run.err
# then `benchmarks/slam_phase_profile.sh run.err [first_frame]` prints, for every `name_ms=` field of
# the trace lines (frame N load / prepare / input / encode / pair decode / pair pointmaps /
# profile), its mean over the frames from first_frame on (default 2: frame 0 records the network
# and frame 1 its first pair), the frame count and the total.
set -euo pipefail
log=$1
first=${2:-2}
sed 's/\x1b\[[0-9;]*m//g' "$log" | awk -v first="$first" '
  match($0, /frames? [0-9]+/) {
    split(substr($0, RSTART, RLENGTH), f, " ")
    if (f[2] + 0 < first) next
    line = substr($0, RSTART + RLENGTH)
    # The phase: the words between the frame number and the first field.
    phase = line; sub(/:.*/, "", phase); sub(/^ and [0-9]+/, "", phase); sub(/^ /, "", phase)
    n = split(line, w, " ")
    for (i = 1; i <= n; i++) if (w[i] ~ /_ms=/) {
      split(w[i], kv, "="); key = phase " " kv[1]
      s[key] += kv[2]; c[key]++
    }
  }
  END {
    for (k in s) printf "%-40s %9.2f ms mean  (%d frames, %.1f ms total)\n", k, s[k] / c[k], c[k], s[k]
  }' | sort
