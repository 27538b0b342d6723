#!/usr/bin/env bash
# The accuracy and capacity runs as recorded in bench/README.md ("Third pass"), for a quiet machine
# whose python3 has aiohttp, httpx, numpy and uvloop (the lent H200 machine's has). Outputs go to
# $OUT (or ./quiet-host-out): machine.txt, accuracy.txt (one table per client), capacity.txt.
set -u
OUT=${OUT:-quiet-host-out}; mkdir -p "$OUT"
PY=${PY:-python3}
{ nproc; uptime; uname -r; "$PY" --version
  "$PY" -c "import aiohttp, httpx, uvloop; print('aiohttp', aiohttp.__version__, 'httpx', httpx.__version__, 'uvloop', uvloop.__version__)"
} > "$OUT/machine.txt" 2>&1
for client in ${ACCURACY_CLIENTS:-sweeper sweeper-uvloop aiohttp}; do
  "$PY" bench/accuracy.py --client "$client" >> "$OUT/accuracy.txt" 2>&1
done
"$PY" bench/capacity.py --levels ${LEVELS:-50,100,150,200,250,300} --rounds 4 \
  --clients ${CAPACITY_CLIENTS:-sweeper,sweeper-uvloop,aiohttp,aiohttp-uvloop,httpx} --guidellm '' > "$OUT/capacity.txt" 2>&1
cat "$OUT/machine.txt" "$OUT/accuracy.txt" "$OUT/capacity.txt"
