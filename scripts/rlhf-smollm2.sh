#!/usr/bin/env bash
# The RLHF pipeline on SmolLM2-135M-Instruct (rtc serve on this CPU), as docs/results.md records it:
# SFT -> reward model -> GRPO against it, each stage reading the one before through its
# checkpoints.jsonl; then `check`: both policies' held-out samples scored by the reward model, the
# gain at matched lengths (scripts/rlhf-length-check.py). Writes out/rlhf-smollm2/{sft,rm,grpo}/
# (metrics, checkpoints), the stages' logs and length-check.json. About 45 minutes on one core shared
# with other jobs (docs/results.md has the times).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/rlhf-smollm2}
STAGES=${STAGES:-sft rm grpo check}  # e.g. STAGES="rm grpo check" reuses an earlier SFT run in $OUT
THREADS=${THREADS:-1}  # torch threads of the server (the machine is shared)
export OMP_NUM_THREADS=1
export MALLOC_ARENA_MAX=2  # the server was OOM-killed once at 7 GB on this shared machine
D=recipes/data
mkdir -p "$OUT"
rtc serve --model smollm2 --port 0 --api-key tml-local --state-dir "$OUT/state" --threads "$THREADS" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do grep -q "export TINKER_BASE_URL" "$OUT/serve.log" && break; sleep 1; done
eval "$(grep '^  export' "$OUT/serve.log")"
stage() { local name=$1; shift; [[ " $STAGES " == *" $name "* ]] || return 0; echo "== $name: $(date -u +%T)"; /usr/bin/time -f "$name: %e s wall, %U s user" \
  python "$@" --log "$OUT/$name/metrics.jsonl" --out "rlhf-$name" 2>&1 | tee "$OUT/$name.log" | grep -E "^step|error|wall" || true; }
stage sft generated/rlhf-1-sft-qwen3.py --data $D/rlhf-sft.jsonl --eval-data $D/rlhf-sft.eval.jsonl \
  --steps 10 --batch-size 8 --eval-every 5 --save-every 10 --max-tokens 48
stage rm generated/rlhf-2-reward-model-qwen3.py --data $D/rlhf-prefs.jsonl --eval-data $D/rlhf-prefs.eval.jsonl \
  --steps 8 --batch-size 4 --lr 2e-3 --eval-every 4 --save-every 8 --max-tokens 48
stage grpo generated/rlhf-3-grpo-qwen3.py --data $D/rlhf-prompts.jsonl --eval-data $D/rlhf-prompts.eval.jsonl \
  --init-from "$OUT/sft/checkpoints.jsonl" --reward-model "$OUT/rm/checkpoints.jsonl" \
  --steps 4 --group-size 4 --prompts-per-step 4 --max-tokens 48 --grade-truncated --lr 5e-4 \
  --eval-every 4 --save-every 4
if [[ " $STAGES " == *" check "* ]]; then
  echo "== check: $(date -u +%T)"
  python scripts/rlhf-length-check.py --sft "$OUT/sft/checkpoints.jsonl" --rm "$OUT/rm/checkpoints.jsonl" \
    --grpo "$OUT/grpo/checkpoints.jsonl" --max-tokens 48 --samples 4 --out "$OUT/length-check.json" 2>&1 | tee "$OUT/check.log"
fi
