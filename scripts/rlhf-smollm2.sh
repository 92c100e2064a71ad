#!/usr/bin/env bash
# The RLHF pipeline on SmolLM2-135M-Instruct (rtc serve on this CPU), as docs/results.md records it:
# SFT -> reward model -> GRPO against it, each stage reading the one before through its
# checkpoints.jsonl. Writes out/rlhf-smollm2/{sft,rm,grpo}/ (metrics, checkpoints, logs).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/rlhf-smollm2}
D=recipes/data
mkdir -p "$OUT"
rtc serve --model smollm2 --port 0 --api-key tml-local --state-dir "$OUT/state" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do grep -q "export TINKER_BASE_URL" "$OUT/serve.log" && break; sleep 1; done
eval "$(grep '^  export' "$OUT/serve.log")"
stage() { local name=$1; shift; echo "== $name: $(date -u +%T)"; /usr/bin/time -f "$name: %e s wall, %U s user" \
  python "$@" --log "$OUT/$name/metrics.jsonl" --out "rlhf-$name" 2>&1 | tee "$OUT/$name.log" | grep -E "^step|error|wall" || true; }
stage sft generated/rlhf-1-sft-qwen3.py --data $D/rlhf-sft.jsonl --eval-data $D/rlhf-sft.eval.jsonl \
  --steps 10 --batch-size 8 --eval-every 5 --save-every 10 --max-tokens 48
stage rm generated/rlhf-2-reward-model-qwen3.py --data $D/rlhf-prefs.jsonl --eval-data $D/rlhf-prefs.eval.jsonl \
  --steps 24 --batch-size 4 --lr 1e-3 --eval-every 6 --save-every 24 --max-tokens 48
stage grpo generated/rlhf-3-grpo-qwen3.py --data $D/rlhf-prompts.jsonl --eval-data $D/rlhf-prompts.eval.jsonl \
  --init-from "$OUT/sft/checkpoints.jsonl" --reward-model "$OUT/rm/checkpoints.jsonl" \
  --steps 16 --group-size 4 --prompts-per-step 8 --max-tokens 64 --grade-truncated --lr 1e-4 \
  --eval-every 4 --save-every 16
