#!/bin/bash
# Training slowdown with a viewer attached, lavapipe.
export XDG_RUNTIME_DIR=/tmp/xdg-runtime-0
B=$HOME/.cache/rust3r/target-view/release/rust3r
L=$HOME/.cache/rust3r/target-view/release/examples/view_load
D=/work/shared/data/lego
COMMON="--steps 300 --downscale 20 --init-count 800 --sh-degree 1 --eval-at 100000"
for rep in 1 2; do
  for mode in base view client; do
    out=/tmp/vbench/$mode-$rep
    rm -rf $out
    case $mode in
      base) $B train $D --out $out $COMMON > $out.log 2>&1 ;;
      view) $B train $D --out $out $COMMON --view --view-port 0 > $out.log 2>&1 ;;
      client)
        $B train $D --out $out $COMMON --view --view-port 0 > $out.log 2>&1 &
        pid=$!
        for i in $(seq 100); do url=$(grep -o "http://[^ ]*" $out.log | head -1); [ -n "$url" ] && break; sleep 0.1; done
        $L $url 320 240 > $out.client 2>&1
        wait $pid ;;
    esac
    echo "$mode $rep $(python3 -c "import json;r=json.load(open('$out/eval.json'))[-1];print(r['it_per_s'], r['train_seconds'])") $(cat $out.client 2>/dev/null)"
  done
done
