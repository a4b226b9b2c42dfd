source .devcarry/prelude.sh >/dev/null 2>&1
mkdir -p $OUT/r
cd .devcarry/gs && LIMIT=200 bash bench/gsplat/device.sh > $OUT/r/gsplat_setup.txt 2>&1; echo "setup rc $?"
export PYTHONPATH=/tmp/site
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw"
timeout 240 $NCU python3 bench/gsplat/raster_bench.py --ns 10m --res 1920x1080 --packed 0 --iters 3 --warmup 1 --no-ref --json /tmp/g.json > $OUT/r/ncu_gsplat.csv 2>$OUT/r/ncu_gsplat.err; echo "ncu gsplat rc $?"
python3 ../ncu_sum.py $OUT/r/ncu_gsplat.csv 30 > $OUT/r/ncu_gsplat_sum.txt 2>&1; cat $OUT/r/ncu_gsplat_sum.txt
rm -f $OUT/r/ncu_gsplat.csv; cd $OUT && tar czf all.tgz r && rm -rf r
