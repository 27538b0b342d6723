#!/usr/bin/env bash
# One command on a GPU machine with PyTorch and transformers 5.x (the H200 image: python 3.12,
# torch 2.11, transformers 5.17, no internet): install the carried wheels, build a random-weight
# Qwen3-MoE-shaped model and a local tokenizer, capture real nvidia-smi outputs and a torch profiler
# trace, then run `sweeper sweep` over search_spaces/transformers-h200.yaml with the local transport
# and write the leaderboard, the report and per-trial GPU memory.
#
#   WHEELS=../.whl OUT=/tmp/out bash bench/gpu/run.sh
#
# WHEELS: folder of wheels to install first (default ../.whl beside the repo; none is fine where
# sweeper's needs are installed). DEADLINE: seconds the whole script may take (default 570, inside
# the device tool's 10 minutes): the sweep starts no trial after DEADLINE - 130 s from the script's
# start and is interrupted (SIGINT: the server stopped, the trial recorded) 100 s later; or give
# SWEEP_SECONDS for a fixed sweep budget.
# DEVICE=cpu runs the same steps on a CPU (a smoke test of the script, not a measurement).
# Files under $OUT (at most 8, as the device tool brings back): run.log, leaderboard.csv,
# gpu_memory.md, study.tar.gz (the study: storage, trials, report), h200_decode.trace.json.gz,
# captures.tar.gz (nvidia-smi outputs, a real OOM log, serve --help).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/sweeper-gpu-out}
WHEELS=${WHEELS:-$REPO/../.whl}
WORK=${WORK:-/tmp/sweeper-gpu}
MODEL=${MODEL:-/tmp/sweeper-model}
DEVICE=${DEVICE:-cuda}
DEADLINE=${DEADLINE:-570}
CAPTURES=${CAPTURES:-1}  # 0: skip the nvidia-smi/OOM captures and the profiler trace (a re-run)
MODEL_ARGS=${MODEL_ARGS:-}
STUDY=${STUDY:-h200}
mkdir -p "$OUT" "$WORK/captures"
exec > >(tee "$OUT/run.log") 2>&1
step() { echo "== $(date -u +%H:%M:%S) $*"; }
started=$(date +%s)

step "install wheels from $WHEELS"
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$REPO
else
  export PYTHONPATH=$REPO
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_UPDATE_CHECK=1
sweeper() { python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' "$@"; }

step "versions"
python3 - <<'EOF'
import importlib.metadata as m, platform
print("python", platform.python_version(), {p: m.version(p) for p in
      ("torch", "transformers", "fastapi", "uvicorn", "pydantic", "optuna", "aiohttp", "pandas")})
EOF
python3 -c 'import torch; print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
python3 -m transformers.cli.transformers serve --help > "$WORK/captures/serve_help.txt" 2>&1 || exit 1

[ "$DEVICE" = cuda ] && { nvidia-smi || exit 1; }
if [ "$DEVICE" = cuda ] && [ "$CAPTURES" = 1 ]; then
  step "nvidia-smi captures: idle, busy (an 8 GiB torch allocation), released"
  python3 "$REPO/bench/gpu/capture_nvidia_smi.py" "$WORK/captures" || exit 1
  step "a real CUDA OOM message from torch's allocator"
  python3 -c 'import torch; torch.empty(512 * 1024**3, dtype=torch.uint8, device="cuda")' > "$WORK/captures/h200_oom.log" 2>&1
  tail -n 3 "$WORK/captures/h200_oom.log"
fi

step "model: random-weight Qwen3-MoE shape and a local BPE tokenizer"
rm -rf "$MODEL"
python3 "$REPO/bench/gpu/make_model.py" "$MODEL" $MODEL_ARGS || exit 1

if [ "$CAPTURES" = 1 ]; then
  step "torch profiler trace of one config (bf16, sdpa, batch 8, prefill + 4 decode steps)"
  python3 "$REPO/bench/gpu/profile_decode.py" "$MODEL" "$OUT/h200_decode.trace.json.gz" --batch 8 --steps 4 \
    || echo "profile failed (the sweep still runs)"
fi

step "hosts and space"
SPACE="$WORK/space.yaml"
sed "s|^model: .*|model: $MODEL|" "$REPO/search_spaces/transformers-h200.yaml" > "$SPACE"
GATE=on
if [ "$DEVICE" != cuda ]; then  # CPU smoke test: the same space on the CPU, no GPU gate
  sed -i -e "s|--device: 'cuda:0'|--device: cpu|" -e "s|--dtype: bfloat16|--dtype: float32|" "$SPACE"
  GATE=off
fi
cat > "$WORK/hosts.yaml" <<EOF
hosts:
  local:
    transport: local
    gpus: 1
    work_dir: $WORK/runs
    base_port: 31000
    gpu_gate: "$GATE"              # the real nvidia-smi: a busy GPU stops the sweep, memory must come back
    gpu_release_timeout_s: 60
EOF

SWEEP_SECONDS=${SWEEP_SECONDS:-$(( DEADLINE - 130 - ($(date +%s) - started) ))}
step "sweep (no new trial after ${SWEEP_SECONDS}s)"
rm -rf "$WORK/results"
timeout -s INT -k 20 $((SWEEP_SECONDS + 100)) \
  python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' \
  sweep "$SPACE" --hosts "$WORK/hosts.yaml" --host local --study "$STUDY" --results "$WORK/results" \
  --time-budget "${SWEEP_SECONDS}s" --seed 0 --top 20
echo "sweep exit $?"

step "leaderboard, report, GPU memory per trial"
sweeper leaderboard "$STUDY" --results "$WORK/results" --top 20 --csv "$OUT/leaderboard.csv"
sweeper report "$STUDY" --results "$WORK/results"
python3 "$REPO/bench/gpu/gpu_memory_table.py" "$WORK/results/$STUDY" | tee "$OUT/gpu_memory.md"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits \
  | tee "$WORK/captures/after_sweep.gpu.csv"

step "pack"
cp "$SPACE" "$WORK/captures/space.yaml"
tar -czf "$OUT/study.tar.gz" -C "$WORK/results" "$STUDY"
tar -czf "$OUT/captures.tar.gz" -C "$WORK" captures
ls -la "$OUT"
step "done in $(( $(date +%s) - started ))s"
