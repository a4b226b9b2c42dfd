#!/bin/bash
# rust3r view frame rate / latency: the image crate's JPEG encoder (old) vs jpeg-encoder (new).
V=.devcarry/viewer
mkdir -p /tmp/b && xz -dc $V/rust3r.xz > /tmp/b/new && xz -dc $V/rust3r_old.xz > /tmp/b/old && cp $V/view_load /tmp/b/ && chmod +x /tmp/b/*
ldconfig -p | grep -q libvulkan || { for f in $V/gl/*.deb; do dpkg -x $f /; done; ldconfig; }
export XDG_RUNTIME_DIR=/tmp/xdg; mkdir -p -m 700 $XDG_RUNTIME_DIR
L=/tmp/b/view_load
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
url_of() { for i in $(seq 900); do u=$(grep -o "http://[^ ]*" $1 | head -1); [ -n "$u" ] && { echo $u; return; }; sleep 0.1; done; }
measure() { # binary n
  /tmp/b/$1 view /tmp/g_$2.ply --port 0 > /tmp/view.log 2>&1 & P=$!
  u=$(url_of /tmp/view.log)
  $L $u 1920 1080 3 > /dev/null
  echo "VIEW $1 $2 $($L $u 1920 1080 8)"
  echo "VIEW $1 $2 $($L $u 960 540 5)"
  kill $P; wait $P 2>/dev/null
}
/tmp/b/new bench scene --npz $V/test_garden.npz --n 1m --out /tmp/g_1m.ply
measure old 1m; measure new 1m; measure old 1m; measure new 1m
/tmp/b/new bench scene --npz $V/test_garden.npz --n 10m --out /tmp/g_10m.ply
measure new 10m
