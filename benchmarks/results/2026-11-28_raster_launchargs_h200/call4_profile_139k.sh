set -u
for b in before after; do xz -dc .devcarry5/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in 1 2; do
for b in before after; do
  echo "== $b plain round $round"
  /tmp/$b bench raster --backend cuda --npz .devcarry5/test_garden.npz --iters 15 --warmup 3 --ns base --res 1920x1080,648x420 2>&1 | grep -v "^\s*$" | grep -v INFO | tail -6
  for m in host device; do
    echo "== $b profile $m round $round"
    /tmp/$b bench raster --backend cuda --npz .devcarry5/test_garden.npz --iters 15 --warmup 3 --ns base --res 1920x1080 --profile $m 2>&1 | grep -v "^\s*$" | grep -v INFO | tail -40
  done
done
done
