#!/usr/bin/env bash
# The main job: compile a recipe card, train it for a few steps against a local `rtc serve`
# running SmolLM2-135M-Instruct on this CPU, print a sample, and plot the curves.
# Outputs land in out/main-job/. The first run converts the model once (about 20 s).
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/main-job
rm -rf "$out"
mkdir -p "$out"
rtc compile recipes/sft-chat-qwen3.yaml -o "$out/loop.py"
rtc run --model smollm2 "$out/loop.py" \
    --data recipes/data/sft-chat.jsonl --eval-data recipes/data/sft-chat.eval.jsonl \
    --steps 12 --eval-every 4 --save-every 6 --lr 5e-4 --max-tokens 48 --temperature 0.2 \
    --log "$out/metrics.jsonl" --out main-job
rtc plot "$out/metrics.jsonl" -o "$out/curves.png"
echo "main job done: $out/metrics.jsonl, $out/checkpoints.jsonl, $out/curves.png"
