source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
for cfg in "cuda f32 bf16" "cuda f16 bf16" "cuda f16 sh8" "wgpu f16 bf16"; do set -- $cfg
  timeout 100 $R bench train-step --backend $1 --npz $NPZ --ns 10m --res 1920x1080 --steps 5 --sh-precision $2 --adam-moments $3 > $OUT/r/step_$1_$2_$3.txt 2>&1; echo "$cfg rc $?"; tail -1 $OUT/r/step_$1_$2_$3.txt; done
