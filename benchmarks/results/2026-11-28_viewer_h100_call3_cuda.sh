#!/bin/bash
# rust3r view frame rate / latency through CUDA and Vulkan, same call.
V=.devcarry/vc
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p /tmp/b && xz -dc $V/rust3r.xz > /tmp/b/rust3r && cp $V/view_load /tmp/b/ && chmod +x /tmp/b/*
export XDG_RUNTIME_DIR=/tmp/xdg; mkdir -p -m 700 $XDG_RUNTIME_DIR
L=/tmp/b/view_load
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
/tmp/b/rust3r info 2>&1 | head -20
url_of() { for i in $(seq 1800); do u=$(grep -o "http://[^ ]*" $1 | head -1); [ -n "$u" ] && { echo $u; return; }; sleep 0.1; done; }
measure() { # backend n
  /tmp/b/rust3r view /tmp/g_$2.ply --port 0 --backend $1 > /tmp/view_$1_$2.log 2>&1 & P=$!
  u=$(url_of /tmp/view_$1_$2.log)
  [ -z "$u" ] && { echo "no url for $1 $2"; cat /tmp/view_$1_$2.log | tail -5; kill $P; return; }
  $L $u 1920 1080 3 > /dev/null
  echo "VIEW $1 $2 1920x1080 $($L $u 1920 1080 8)"
  echo "VIEW $1 $2 960x540 $($L $u 960 540 5)"
  kill $P; wait $P 2>/dev/null
  tail -3 /tmp/view_$1_$2.log
}
/tmp/b/rust3r bench scene --npz $V/test_garden.npz --n 1m --out /tmp/g_1m.ply
measure cuda 1m; measure wgpu 1m
/tmp/b/rust3r bench scene --npz $V/test_garden.npz --n 10m --out /tmp/g_10m.ply
measure cuda 10m; measure wgpu 10m; measure cuda 10m
