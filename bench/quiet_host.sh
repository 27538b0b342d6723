#!/usr/bin/env bash
# The accuracy and capacity runs as recorded in bench/README.md ("Second pass"), for a quiet machine
# whose python3 has aiohttp, numpy and uvloop (the lent H200 machine's has). Outputs go to $OUT (or
# ./quiet-host-out): machine.txt, accuracy.txt (one table per client), capacity.txt.
set -u
OUT=${OUT:-quiet-host-out}; mkdir -p "$OUT"
PY=${PY:-python3}
{ nproc; uptime; "$PY" --version; "$PY" -c "import aiohttp, uvloop; print('aiohttp', aiohttp.__version__, 'uvloop', uvloop.__version__)"; } \
  > "$OUT/machine.txt" 2>&1
for client in ${ACCURACY_CLIENTS:-aiohttp aiohttp-close aiohttp-uvloop}; do
  "$PY" bench/accuracy.py --rounds 4 --client "$client" >> "$OUT/accuracy.txt" 2>&1
done
"$PY" bench/capacity.py --levels ${LEVELS:-50,75,100,125,150,200,250} --rounds 4 \
  --clients ${CAPACITY_CLIENTS:-aiohttp,aiohttp-close,aiohttp-uvloop} --guidellm '' > "$OUT/capacity.txt" 2>&1
cat "$OUT/machine.txt" "$OUT/accuracy.txt" "$OUT/capacity.txt"
