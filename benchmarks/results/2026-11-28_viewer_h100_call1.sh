#!/bin/bash
# Viewer measurements on the device: rust3r view frame rate / latency (1M, 10M Gaussians) and the
# training slowdown with a live view attached. Run from the repo root.
V=.devcarry/viewer
mkdir -p /tmp/b && xz -dc $V/rust3r.xz > /tmp/b/rust3r && cp $V/view_load /tmp/b/ && chmod +x /tmp/b/*
ldconfig -p | grep -q libvulkan || { for f in $V/gl/*.deb; do dpkg -x $f /; done; ldconfig; }
export XDG_RUNTIME_DIR=/tmp/xdg; mkdir -p -m 700 $XDG_RUNTIME_DIR
B=/tmp/b/rust3r; L=/tmp/b/view_load
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B info 2>&1 | grep -v XDG | head -8
url_of() { for i in $(seq 600); do u=$(grep -o "http://[^ ]*" $1 | head -1); [ -n "$u" ] && { echo $u; return; }; sleep 0.1; done; }
for n in 1m 10m; do
  t0=$(date +%s)
  $B bench scene --npz $V/test_garden.npz --n $n --out /tmp/g_$n.ply
  $B view /tmp/g_$n.ply --port 0 > /tmp/view_$n.log 2>&1 & P=$!
  u=$(url_of /tmp/view_$n.log); echo "view $n ready after $(( $(date +%s) - t0 )) s: $u"
  $L $u 1920 1080 4 > /dev/null   # warm-up (Vulkan runs slow until the GPU has been busy)
  echo "VIEW $n $($L $u 1920 1080 12)"
  echo "VIEW $n $($L $u 960 540 8)"
  kill $P; wait $P 2>/dev/null; rm -f /tmp/g_$n.ply
done
C="--steps 3000 --downscale 2 --eval-at 100000 --checkpoint-every 0"
for rep in 1 2; do
  for mode in base drag idle; do
    [ $mode = idle ] && [ $rep = 2 ] && continue
    out=/tmp/t-$mode-$rep; rm -rf $out
    case $mode in
      base) $B train $V/fox --out $out $C > $out.log 2>&1 ;;
      idle) $B train $V/fox --out $out $C --view --view-port 0 > $out.log 2>&1 ;;
      drag) $B train $V/fox --out $out $C --view --view-port 0 > $out.log 2>&1 & P=$!
            u=$(url_of $out.log); $L $u 1920 1080 > $out.client 2>&1; wait $P ;;
    esac
    echo "TRAIN $mode $rep $(python3 -c "import json;r=json.load(open('$out/eval.json'))[-1];print('it/s %.2f train_s %.2f splats %d psnr %.2f'%(r['it_per_s'],r['train_seconds'],r['num_splats'],r['psnr']))") $(cat $out.client 2>/dev/null)"
  done
done
