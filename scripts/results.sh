#!/usr/bin/env bash
# Reproduce docs/results.md: SmolLM2-135M-Instruct on this CPU through rtc serve.
# 1) SFT card on the chat demonstrations; 2) GRPO math card on the shipped arithmetic set, with the
# held-out split scored before and after. Outputs: out/results/{sft,grpo}/ and docs/*.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/results
rm -rf "$out" && mkdir -p "$out/sft" "$out/grpo" docs
start=$(date +%s)
rtc run --model smollm2 generated/sft-chat-qwen3.py \
    --data recipes/data/sft-chat.jsonl --eval-data recipes/data/sft-chat.eval.jsonl \
    --steps 24 --eval-every 6 --save-every 12 --lr 5e-4 --max-tokens 48 \
    --log "$out/sft/metrics.jsonl" --out results-sft | tee "$out/sft/stdout.txt"
echo "sft wall time: $(( $(date +%s) - start )) s" | tee -a "$out/sft/stdout.txt"
rtc plot "$out/sft/metrics.jsonl" -o docs/results-sft.png
start=$(date +%s)
rtc run --model smollm2 generated/grpo-math-qwen3.py \
    --data recipes/data/math-arithmetic.jsonl --eval-data recipes/data/math-arithmetic.eval.jsonl \
    --steps 30 --group-size 8 --prompts-per-step 4 --max-tokens 64 --temperature 1.0 \
    --eval-every 15 --save-every 15 --lr 3e-4 \
    --log "$out/grpo/metrics.jsonl" --out results-grpo | tee "$out/grpo/stdout.txt"
echo "grpo wall time: $(( $(date +%s) - start )) s" | tee -a "$out/grpo/stdout.txt"
rtc plot "$out/grpo/metrics.jsonl" -o docs/results-grpo.png
