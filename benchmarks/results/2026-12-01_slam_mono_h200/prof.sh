#!/usr/bin/env bash
# Device profile of the mono SLAM system: bash .dev/prof.sh BIN[,BIN..] FRAMES "FLAGS" ["FLAGS" ...]
# binaries in .dev/bin/NAME.xz, frames in .dev/rk; per run: FPS line, per-phase means, tracking trace.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bins=$1; frames=$2; shift 2
mkdir -p /tmp/r3 $OUT/logs
for b in ${bins//,/ }; do xz -dc .dev/bin/$b.xz > /tmp/r3/$b; chmod +x /tmp/r3/$b; done
rm -rf /tmp/rk && cp -r .dev/rk /tmp/rk
echo "== $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
k=0
for rep in $(seq ${REPS:-2}); do
for flags in "$@"; do
  for b in ${bins//,/ }; do
    k=$((k+1)); log=$OUT/logs/r${k}_${b}.err
    echo "== run $k: $b $flags"
    # shellcheck disable=SC2086
    RUST_LOG=warn,rust3r=info,rust3r_slam=trace,rust3r_mast3r=trace timeout 200 /tmp/r3/$b bench slam-mono /tmp/rk \
      --backend cuda --frames $frames $flags --json $OUT/logs/r${k}_${b}.json 2> $log | grep -E "FPS|time:"
    bash benchmarks/slam_phase_profile.sh $log 2>&1 | grep -E "profile|decode|pointmaps"
    sed 's/\x1b\[[0-9;]*m//g' $log | grep -E "pair tracked on the GPU" | awk '{for(i=1;i<=NF;i++){if($i=="in")a+=$(i+1); if($i=="matching")m+=$(i+1)} n++} END{printf "  tracked %.2f ms, matching %.2f ms (%d frames)\n", a/n, m/n, n}'
    sed 's/\x1b\[[0-9;]*m//g' $log | grep -E "pair matching:|pair refinement:" | tail -2
  done
done
done
cd $OUT && tar cJf logs.txz logs && rm -rf logs
