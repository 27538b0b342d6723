#!/usr/bin/env bash
# The accuracy and capacity runs on a quiet lent machine without a package index: a venv from wheels
# carried in .devwheels/ (pip download --only-binary=:all: --python-version 3.12 --platform
# manylinux2014_x86_64 -d .devwheels aiohttp numpy uvloop pytest), then the client's tests and the
# two benchmarks, each output into $OUT (or ./quiet-host-out).
set -u
OUT=${OUT:-quiet-host-out}; mkdir -p "$OUT"
PY=$(command -v python3.12 || command -v python3)
{ uname -a; nproc; "$PY" --version; uptime; } > "$OUT/machine.txt" 2>&1
"$PY" -m venv /tmp/v && /tmp/v/bin/pip install -q --no-index --find-links .devwheels aiohttp numpy uvloop pytest \
  > "$OUT/setup.txt" 2>&1 || { cat "$OUT/setup.txt"; exit 1; }
/tmp/v/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_sse.py tests/integration/test_loadgen_client.py \
  tests/integration/test_kept_connections.py -k "not ssh and not llama" > "$OUT/tests.txt" 2>&1
tail -3 "$OUT/tests.txt"
for client in ${ACCURACY_CLIENTS:-aiohttp aiohttp-close aiohttp-uvloop}; do
  /tmp/v/bin/python bench/accuracy.py --rounds 4 --client "$client" >> "$OUT/accuracy.txt" 2>&1
done
/tmp/v/bin/python bench/capacity.py --levels ${LEVELS:-50,100,150,200,250} --rounds 4 \
  --clients ${CAPACITY_CLIENTS:-aiohttp,aiohttp-close,aiohttp-uvloop} --guidellm '' > "$OUT/capacity.txt" 2>&1
cat "$OUT/accuracy.txt" "$OUT/capacity.txt"
