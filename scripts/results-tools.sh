#!/usr/bin/env bash
# Reproduce "Tool agents (issue 11)" in docs/results.md: SmolLM2-135M-Instruct on this CPU through one
# `rtc serve --model smollm2 --threads 1`, kept small for a shared 2-core machine:
#   base) the GRPO tool loop from the base weights: its step-0 eval is the held-out score before any
#         training (it then takes one GRPO step and evaluates again);
#   sft)  SFT on tool traces (sft-tools-qwen3), only the model's tokens trained;
#   grpo) GRPO with search and the calculator (grpo-tools-qwen3), starting from the SFT's weights.
# STAGES picks the stages (default all three, in that order); a later stage reuses the server state
# (out/results-tools/state) and the checkpoints of an earlier invocation.
# Held-out: the first $EVAL_ROWS questions of recipes/data/tool-questions.eval.jsonl, one episode each.
# Outputs: out/results-tools/{base,sft,grpo}/ (metrics, stdout) and docs/results-tools-*.png.
set -euo pipefail
cd "$(dirname "$0")/.."
EVAL_ROWS=${EVAL_ROWS:-16}
SFT_STEPS=${SFT_STEPS:-6}
SFT_BATCH=${SFT_BATCH:-1}  # one trace per step: two long traces took the server past 12 GB (OOM-killed)
GROUP=${GROUP:-2}
GRPO_STEPS=${GRPO_STEPS:-1}
STAGES=${STAGES:-base sft grpo}
out=out/results-tools
mkdir -p "$out/state" docs
for stage in $STAGES; do rm -rf "${out:?}/$stage" && mkdir -p "$out/$stage"; done
head -n "$EVAL_ROWS" recipes/data/tool-questions.eval.jsonl >"$out/questions.eval.jsonl"
head -n 4 recipes/data/tool-traces.eval.jsonl >"$out/traces.eval.jsonl"

port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key="tml-results-tools-$(python -c 'import secrets; print(secrets.token_hex(8))')"
rtc serve --model smollm2 --threads 1 --port "$port" --api-key "$key" --state-dir "$out/state" --quiet \
    >"$out/serve.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    grep -q "ready on" "$out/serve.log" && break
    kill -0 "$server" || { cat "$out/serve.log"; exit 1; }
    sleep 1
done
export TINKER_BASE_URL="http://127.0.0.1:$port" TINKER_API_KEY="$key" OMP_NUM_THREADS=1
tools=(--corpus recipes/data/tool-corpus.jsonl --eval-data "$out/questions.eval.jsonl" --eval-samples 1
    --max-turns 3 --max-tokens 64 --temperature 1.0 --group-size "$GROUP" --prompts-per-step 1 --lr 2e-4)

timed() { # timed NAME CMD...: run, tee stdout to $out/NAME/stdout.txt, add the wall time
    local name=$1 start
    shift
    start=$(date +%s)
    "$@" | tee "$out/$name/stdout.txt"
    echo "$name wall time: $(($(date +%s) - start)) s" | tee -a "$out/$name/stdout.txt"
}

for stage in $STAGES; do
    case $stage in
    base)
        timed base python generated/grpo-tools-qwen3.py --data recipes/data/tool-questions.jsonl "${tools[@]}" \
            --init-from '' --steps 1 --eval-every 1 --save-every 0 --log "$out/base/metrics.jsonl" \
            --out results-tools-base
        ;;
    sft)
        timed sft python generated/sft-tools-qwen3.py --data recipes/data/tool-traces.jsonl \
            --eval-data "$out/traces.eval.jsonl" --steps "$SFT_STEPS" --batch-size "$SFT_BATCH" --lr 1e-3 \
            --eval-every "$SFT_STEPS" --save-every "$SFT_STEPS" --max-tokens 64 --log "$out/sft/metrics.jsonl" \
            --out results-tools-sft
        rtc plot "$out/sft/metrics.jsonl" -o docs/results-tools-sft.png
        ;;
    grpo)
        timed grpo python generated/grpo-tools-qwen3.py --data recipes/data/tool-questions.jsonl "${tools[@]}" \
            --init-from "$out/sft/checkpoints.jsonl" --steps "$GRPO_STEPS" --eval-every "$GRPO_STEPS" \
            --save-every "$GRPO_STEPS" --log "$out/grpo/metrics.jsonl" --out results-tools-grpo
        rtc plot "$out/grpo/metrics.jsonl" -o docs/results-tools-grpo.png
        ;;
    *) echo "unknown stage $stage (base, sft, grpo)" >&2 && exit 2 ;;
    esac
done
