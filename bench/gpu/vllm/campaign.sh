#!/usr/bin/env bash
# Issue 29's campaign on the H200: `sweeper campaign` on bench/gpu/vllm/separate.yaml (vLLM's defaults
# against --max-num-seqs 96 at C = 128), run in a session of its own so that it outlives the device
# call's 10 minutes; each call waits on it and packs what it has into $OUT.
#
#   cd .gpu && VOCAB=24064 MODEL_ARGS="--arch llama ..." bash bench/gpu/vllm/campaign.sh start
#   cd .gpu && bash bench/gpu/vllm/campaign.sh wait          (the next calls, the machine still warm)
#
# start: run.sh with SWEEP=0 (payload, model, hosts.yaml, the space), then the campaign in the
# background. wait: until the campaign ends or WAIT seconds (default 540) pass. At "campaign phase:
# profile" it is interrupted (SIGINT, the user's Ctrl-C) unless PROFILE=1: the profile costs a launch,
# and the time from that SIGINT to the exit is logged (Ctrl-C during a real start-up). Then `best
# --json`, the leaderboard, the report, and the study (traces left out) into $OUT.
# CAMPAIGN_ARGS replaces the default campaign options.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${OUT:-/tmp/sweeper-vllm-out}
WORK=${WORK:-/tmp/sweeper-vllm}
STUDY=${STUDY:-separate}
WAIT=${WAIT:-540}
CAMPAIGN_ARGS=${CAMPAIGN_ARGS:---finalists 2 --repeats 3 --max-repeats 4 --max-in-launch-repeats 2 --trials 2 --max-launches 11 --time-budget 1000s --seed 0}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$REPO PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_HUB_DISABLE_UPDATE_CHECK=1
export VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0   # as run.sh
sweeper() { python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' "$@"; }
stamp() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$WORK/wait.log"; }

if [ "${1:-wait}" = start ]; then
  SWEEP=0 CAPTURES=0 SIDE= PROFILE=0 SPACE_FILE=bench/gpu/vllm/separate.yaml OUT="$OUT" WORK="$WORK" \
    bash "$REPO/bench/gpu/vllm/run.sh" || exit 1
  mv "$OUT/run.log" "$OUT/prepare.log"; rm -f "$OUT/captures.tar.gz"
  rm -rf "$WORK/results"
  # shellcheck disable=SC2086
  setsid nohup python3 -c 'import sys; from sweeper.cli import main; sys.argv[0] = "sweeper"; sys.exit(main())' \
    --log-file "$WORK/campaign.timed.log" campaign "$WORK/space.yaml" --hosts "$WORK/hosts.yaml" --host local \
    --study "$STUDY" --results "$WORK/results" $CAMPAIGN_ARGS > "$WORK/campaign.log" 2>&1 < /dev/null &
  echo $! > "$WORK/campaign.pid"
  stamp "campaign started, pid $(cat "$WORK/campaign.pid")"
fi

pid=$(cat "$WORK/campaign.pid") || { echo "no campaign on this machine: start it"; exit 1; }
until=$(( $(date +%s) + WAIT ))
while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do
  if [ "${PROFILE:-0}" != 1 ] && [ ! -f "$WORK/interrupted" ] && grep -q "campaign phase: profile" "$WORK/campaign.log"; then
    kill -INT "$pid"; date +%s.%N > "$WORK/interrupted"; stamp "SIGINT at the profile phase"
  fi
  sleep 2
done
if kill -0 "$pid" 2>/dev/null; then
  stamp "still running"
else
  [ -f "$WORK/interrupted" ] && stamp "ended $(python3 -c "import time; print(f'{time.time() - $(cat "$WORK/interrupted"):.1f}')") s after the SIGINT"
  sweeper best "$STUDY" --results "$WORK/results" --json > "$OUT/best.json" 2>&1
  sweeper leaderboard "$STUDY" --results "$WORK/results" --csv "$OUT/leaderboard.csv" > "$OUT/leaderboard.txt" 2>&1
  sweeper report "$STUDY" --results "$WORK/results" >> "$OUT/leaderboard.txt" 2>&1
  nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits | tee -a "$WORK/wait.log"
fi
cp "$WORK/campaign.log" "$WORK/wait.log" "$OUT/"
[ -d "$WORK/results" ] && tar -czf "$OUT/study.tar.gz" --exclude='*.json.gz' --exclude='vllm-cache' -C "$WORK/results" .
tail -40 "$WORK/campaign.log"
ls -la "$OUT"
