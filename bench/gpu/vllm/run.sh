#!/usr/bin/env bash
# One command on the H200 machine (python 3.12, torch 2.11, no internet): assemble and unpack the
# carried vLLM 0.24.0 payload, build the random-weight Qwen3-MoE model, capture the real artifacts
# (serve --help=all, nvidia-smi, raw streams, an in-stream error, a torch profiler trace, the JIT
# line), run `vllm bench serve` and `sweeper load` side by side on one server, then sweep
# search_spaces/vllm-h200.yaml through the local host (GPU gate on, correctness gate on), write the
# leaderboard, the report, the GPU memory table, profile the winner, and pack it all into $OUT.
#
#   cd .gpu && PARTS=/tmp/parts bash bench/gpu/vllm/run.sh        (bench/gpu/vllm/README.md)
#
# PARTS: folder holding part.a? and SHA256SUMS (../shared/tools/vllm-h200-stage.sh, re-split to fit a
# call); skipped when /tmp/site/vllm already exists. DEADLINE: seconds the script may take (default
# 570): no new trial after DEADLINE - 150 s, the sweep interrupted (SIGINT) 100 s later.
# CAPTURES=0 skips the hand-started server (captures + side by side); SIDE=1,4,16 its levels
# (empty: none). SWEEP=0 skips the sweep; PROFILE=0 the winner's profile. VOCAB=N pads the tokenizer
# to N tokens (0: its natural 16,384). RESUME=1 continues the study of an earlier call on this machine.
# MODEL_ARGS: make_model.py's arguments (default its Qwen3-MoE shape). VARIANCE="ARGS": variance.py
# with ARGS (e.g. "--launches 3 --tag default"), its raw data packed as variance.tar.gz (issue 29).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${OUT:-/tmp/sweeper-vllm-out}
PARTS=${PARTS:-/tmp/parts}
WORK=${WORK:-/tmp/sweeper-vllm}
MODEL=${MODEL:-/tmp/sweeper-model}
DEADLINE=${DEADLINE:-570}
CAPTURES=${CAPTURES:-1}
SIDE=${SIDE-1,4,16}
SWEEP=${SWEEP:-1}
PROFILE=${PROFILE:-1}
VOCAB=${VOCAB:-0}
RESUME=${RESUME:-0}
STUDY=${STUDY:-vllm-h200}
mkdir -p "$OUT" "$WORK/captures"
exec > >(tee "$OUT/run.log") 2>&1
step() { echo "== $(date -u +%H:%M:%S) +$(( $(date +%s) - started ))s $*"; }
started=$(date +%s)

if [ ! -d /tmp/site/vllm ]; then
  step "assemble and unpack the payload from $PARTS"
  (cd "$PARTS" && sha256sum -c SHA256SUMS) || { echo "parts missing or damaged: carry them again"; exit 1; }
  cat "$PARTS"/part.a? | xz -dc | tar -xf - -C /tmp || exit 1
fi
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_UPDATE_CHECK=1
export VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer is not carried (vllm-h200.md)
export NCCL_NVLS_ENABLE=0              # the device notes: NVLink multicast stays off
sweeper() { python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' "$@"; }

step "versions"
python3 - <<'EOF'
import importlib.metadata as m, platform
print("python", platform.python_version(), {p: m.version(p) for p in
      ("torch", "vllm", "transformers", "triton", "fastapi", "uvicorn", "pydantic", "openai", "optuna")})
EOF
nvidia-smi | tee "$WORK/captures/nvidia_smi.txt" || exit 1
nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.used,memory.total --format=csv,noheader,nounits \
  | tee "$WORK/captures/nvidia_smi_idle.gpu.csv"

if [ ! -f "$MODEL/config.json" ]; then
  step "model: random-weight Qwen3-MoE shape, local BPE tokenizer (vocab pad: $VOCAB)"
  python3 "$REPO/bench/gpu/make_model.py" "$MODEL" --pad-to "$VOCAB" ${MODEL_ARGS:-} || exit 1
fi
cp "$MODEL/config.json" "$WORK/captures/model_config.json"; cp "$MODEL/tokenizer.json" "$WORK/captures/model_tokenizer.json"

if [ "$CAPTURES" = 1 ]; then
  step "serve --help=all"
  python3 -m vllm.entrypoints.cli.main serve --help=all > "$WORK/captures/serve_help_all-0.24.0.txt" 2>&1
  wc -l "$WORK/captures/serve_help_all-0.24.0.txt"
fi
if [ "$CAPTURES" = 1 ] || [ -n "$SIDE" ]; then
  step "one server by hand: captures and side by side (levels: $SIDE)"
  timeout -k 10 300 python3 "$REPO/bench/gpu/vllm/capture.py" "$MODEL" "$WORK/server" --side-by-side "$SIDE" \
    --captures "$CAPTURES" --deadline $(( started + ${SIDE_SECONDS:-260} )) || echo "capture exit $?"
  python3 "$REPO/bench/gpu/vllm/promdiff.py" "$WORK/server" | tee "$OUT/side_by_side.md" || true
  rm -f "$WORK"/server/trace_*.json.gz.tmp
  for f in "$WORK"/server/trace_*; do [ -f "$f" ] && cp "$f" "$OUT/vllm_trace.json.gz" && break; done
fi

if [ -n "${VARIANCE:-}" ]; then
  step "variance: $VARIANCE"
  python3 "$REPO/bench/gpu/vllm/variance.py" "$MODEL" "$WORK/variance" $VARIANCE --deadline $(( started + DEADLINE - 25 ))
  echo "variance exit $?"
  tar -czf "$OUT/variance.tar.gz" -C "$WORK" variance
fi

cat > "$WORK/hosts.yaml" <<EOF
hosts:
  local:
    transport: local
    gpus: ${GPUS:-1}
    work_dir: $WORK/runs
    base_port: 31000
    gpu_gate: "on"                 # the real nvidia-smi: a busy GPU stops the sweep, memory must come back
    gpu_release_timeout_s: 60
EOF
SPACE="$WORK/space.yaml"
sed "s|^model: .*|model: $MODEL|" "$REPO/${SPACE_FILE:-search_spaces/vllm-h200.yaml}" > "$SPACE"  # SPACE_FILE, GPUS: issue 21
if [ "$SWEEP" = 1 ]; then
  SWEEP_SECONDS=$(( DEADLINE - 150 - ($(date +%s) - started) ))
  step "sweep (no new trial after ${SWEEP_SECONDS}s)"
  [ "$RESUME" = 1 ] || rm -rf "$WORK/results"
  interrupt_at=$(( $(date +%s) + SWEEP_SECONDS + 100 ))
  timeout -s INT -k 40 $((SWEEP_SECONDS + 100)) \
    python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' \
    sweep "$SPACE" --hosts "$WORK/hosts.yaml" --host local --study "$STUDY" --results "$WORK/results" \
    --time-budget "${SWEEP_SECONDS}s" --seed 0 --top 20
  rc=$?
  echo "sweep exit $rc$( [ "$rc" = 124 ] && echo ": interrupted (SIGINT) at $(date -u -d @$interrupt_at +%H:%M:%S), ended $(( $(date +%s) - interrupt_at ))s after it")"
fi

if [ -d "$WORK/results/$STUDY" ]; then
  step "leaderboard, report, GPU memory per trial"
  sweeper leaderboard "$STUDY" --results "$WORK/results" --top 20 --csv "$OUT/leaderboard.csv"
  sweeper report "$STUDY" --results "$WORK/results" > /dev/null
  python3 "$REPO/bench/gpu/gpu_memory_table.py" "$WORK/results/$STUDY" | tee "$OUT/gpu_memory.md"
  left=$(( DEADLINE - ($(date +%s) - started) ))
  if [ "$PROFILE" = 1 ] && [ "$left" -gt 150 ]; then
    step "profile of the winner (${left}s left)"
    timeout -s INT -k 10 $(( left - 30 )) python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' \
      profile "$STUDY" --best --results "$WORK/results" --hosts "$WORK/hosts.yaml" --seconds 3 --top 12 \
      | tee "$OUT/profile.txt"
  fi
fi
nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits | tee "$WORK/captures/after.gpu.csv"

step "pack"
cp "$SPACE" "$WORK/captures/space.yaml"
[ -d "$WORK/results" ] && tar -czf "$OUT/study.tar.gz" --exclude='*.json.gz' -C "$WORK/results" .
[ -d "$WORK/server" ] && tar -czf "$OUT/server.tar.gz" --exclude='trace_*' -C "$WORK" server
tar -czf "$OUT/captures.tar.gz" -C "$WORK" captures
ls -la "$OUT"
step "done"
