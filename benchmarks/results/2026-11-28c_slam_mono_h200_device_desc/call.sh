set -uo pipefail
mkdir -p /tmp/r3 $OUT/m && xz -dc .devcarry8/rust3r.xz > /tmp/r3/rust3r && chmod +x /tmp/r3/rust3r
R=/tmp/r3/rust3r
rm -rf /tmp/rk && cp -r .devcarry6/rk /tmp/rk
echo "== $(nproc) cores"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 60 $R bench transfer --backend cuda --rounds 10 2>&1 | grep -v INFO | tail -12
export RK=/tmp/rk RUST3R=$R OUT=$OUT/m
timeout 120 bash benchmarks/slam_mono_bench.sh "300:1:--gpu-tracking --timing 20"
timeout 200 bash benchmarks/slam_mono_bench.sh 300:1:--gpu-tracking
timeout 120 bash benchmarks/slam_mono_bench.sh "300:1:--gpu-tracking --timing 20 --host-descriptors"
timeout 200 bash benchmarks/slam_mono_bench.sh "300:1:--gpu-tracking --host-descriptors"
RUST_LOG=rust3r_slam=trace timeout 60 $R bench slam-mono /tmp/rk --backend cuda --frames 40 --gpu-tracking 2>&1 | grep -E "pair (matching|refinement)|tracked on the GPU" > $OUT/stages_gpu_40frames_device.txt; tail -6 $OUT/stages_gpu_40frames_device.txt
