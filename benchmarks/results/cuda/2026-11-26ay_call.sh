source .devcarry/prelude.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/r
NPZ=$PWD/.devcarry/gs/shared/data/garden_points/test_garden.npz
timeout 150 $R bench train-step --npz $NPZ --ns 20m --res 1920x1080 --steps 3 --adam-moments sh8 > $OUT/r/step_wgpu_sh8_20m.txt 2>&1; echo "wgpu sh8 20m rc $?"; tail -2 $OUT/r/step_wgpu_sh8_20m.txt
timeout 60 $R bench train-step --npz $NPZ --ns 20m --res 1920x1080 --steps 3 > $OUT/r/step_wgpu_bf16_20m.txt 2>&1; echo "wgpu bf16 20m rc $?"; tail -2 $OUT/r/step_wgpu_bf16_20m.txt
timeout 60 $R bench train-step --npz $NPZ --ns 10m --res 1920x1080 --steps 5 > $OUT/r/step_wgpu_bf16_10m.txt 2>&1; echo "wgpu bf16 10m rc $?"; tail -1 $OUT/r/step_wgpu_bf16_10m.txt
