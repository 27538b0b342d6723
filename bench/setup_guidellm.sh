#!/usr/bin/env bash
# A separate venv for the benchmarks' independent client (guidellm needs torch; sweeper does not):
# the CPU torch wheel on this machine's disk first, then guidellm, httpx and tokenizers from PyPI;
# then a local word-level tokenizer in Hugging Face format, so guidellm never reaches for a hub.
set -euo pipefail
VENV=${BENCHVENV:-/tmp/benchvenv}
TOKENIZER=${BENCH_TOKENIZER:-/tmp/bench-tokenizer}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q guidellm httpx tokenizers numpy aiohttp uvloop
"$VENV/bin/pip" install -q -e "$(dirname "$0")/.."  # sweeper itself (parity.py starts its simulator)
HF_HUB_OFFLINE=1 "$VENV/bin/python" "$(dirname "$0")/make_tokenizer.py" "$TOKENIZER"
echo "guidellm: $VENV/bin/guidellm  tokenizer: $TOKENIZER"
