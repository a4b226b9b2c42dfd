set -uo pipefail
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json NCCL_NVLS_ENABLE=0
mkdir -p /tmp/r3 $OUT/r && xz -dc .devcarry8/rust3r.xz > /tmp/r3/rust3r && chmod +x /tmp/r3/rust3r
R=/tmp/r3/rust3r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$R info 2>&1 | grep -v INFO | head -12
b() { timeout 240 $R bench mast3r --backend $1 --size full --precision $2 --iters $3 --warmup 2 ${4:-} --json $OUT/r/net_$1_$2_$5.json > $OUT/r/net_$1_$2_$5.txt 2>&1; echo "bench $1 $2 $5 rc $?"; grep -v INFO $OUT/r/net_$1_$2_$5.txt | tail -4; }
b wgpu f32 10 "" 1
b wgpu f16 10 "" 1
RUST3R_CUDA_TF32=1 b cuda f32 20 --graph 1
timeout 150 python3 benchmarks/mast3r_torch.py --size full --precision tf32 --json $OUT/r/torch_tf32.json > $OUT/r/torch_tf32.txt 2>&1; echo "torch rc $?"; tail -4 $OUT/r/torch_tf32.txt
b wgpu f32 10 "" 2
b wgpu f16 10 "" 2
