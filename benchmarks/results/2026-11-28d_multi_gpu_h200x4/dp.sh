set -uo pipefail
# #27: data-parallel training over NCCL, 1/2/4 GPUs (binary: spv branch = main 9277280 + h27 6abbd18 + spirv feature).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/r3 $OUT/r && xz -dc .devcarry10/rust3r.xz > /tmp/r3/rust3r && chmod +x /tmp/r3/rust3r
R=/tmp/r3/rust3r
[ -d /tmp/lego ] || python3 .devcarry10/unwebp.py .devcarry10/lego /tmp/lego
D=/tmp/lego
NCCL_LIB=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))")/lib
mkdir -p /tmp/nccl && ln -sf $NCCL_LIB/libnccl.so.2 /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$NCCL_LIB:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1; nvidia-smi -L | wc -l; ls $D/train | wc -l
