set -uo pipefail
# #24 item 6: the mono system before (2811d86) and after (h24d merged, 8e4fd74) in one call, 150 redkitchen frames.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/r3 $OUT/r
xz -dc .devcarry8/rust3r.xz > /tmp/r3/old && xz -dc .devcarry11/rust3r.xz > /tmp/r3/rust3r && chmod +x /tmp/r3/*
rm -rf /tmp/rk && cp -r .devcarry11/rk /tmp/rk
export RK=/tmp/rk
for b in old rust3r old rust3r; do
  RUST3R=/tmp/r3/$b OUT=$OUT/r/$b timeout 120 bash benchmarks/slam_mono_bench.sh "150:1:--gpu-tracking --timing 20" 2>&1 | grep -E "fps|FPS|load_s|track_s|map_s|prepare|error|Error" | head -12
done
for b in old rust3r; do
  RUST3R=/tmp/r3/$b OUT=$OUT/r/$b timeout 150 bash benchmarks/slam_mono_bench.sh 150:1:--gpu-tracking 2>&1 | grep -E "fps|FPS|ate|ATE|error|Error" | head -8
done
RUST_LOG=warn,rust3r=info,rust3r_slam=debug,rust3r_mast3r=trace timeout 100 /tmp/r3/rust3r bench slam-mono $RK --backend cuda --frames 150 --gpu-tracking --timing 20 --json $OUT/r/prof.json 2> /tmp/prof.err >/dev/null
bash benchmarks/slam_phase_profile.sh /tmp/prof.err 2>&1 | tail -30 | tee $OUT/r/profile.txt
# #26 item 2: does SPIR-V lift the 2 GiB binding (shader 64-bit indexing) so training passes ~23M Gaussians through Vulkan?
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
timeout 60 /tmp/r3/rust3r info 2>&1 | grep -E "Vulkan|binding" | head -4
timeout 150 /tmp/r3/rust3r bench train-step --backend wgpu --npz .devcarry11/test_garden.npz --ns 30m --res 1920x1080 --steps 3 2>&1 | grep -v INFO | tail -6
cd $OUT && tar czf mono.tgz r && rm -rf r
