#!/usr/bin/env bash
# The main job: show that training on this CPU makes SmolLM2-135M-Instruct better at something.
#
# The SFT card (recipes/sft-chat-qwen3.yaml), compiled with `rtc compile`, trains 12 steps of 8
# demonstrations on recipes/data/sft-json.jsonl (pull a name, an age and a city out of a sentence as
# a JSON object) against a local `rtc serve`. Then scripts/main_job_report.py samples the 40
# held-out rows (people, cities and half the phrasings never trained on) from the base weights and
# from the trained checkpoint and prints the before/after table, two rows side by side and the loss
# curve. Outputs land in out/main-job/ (metrics.jsonl, checkpoints.jsonl, report.md, replies.jsonl,
# curves.png, server.log). About 3 minutes of compute here; the first run also converts the model (about 20 s).
set -euo pipefail
cd "$(dirname "$0")/.."
out=out/main-job
rm -rf "$out"
mkdir -p "$out"
rtc compile recipes/sft-chat-qwen3.yaml -o "$out/loop.py"

python -m rtc.server --model smollm2 --port 0 --state-dir "$out/state" >"$out/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 900); do
    grep -q "TINKER_API_KEY=" "$out/server.log" && break
    kill -0 "$server" 2>/dev/null || { cat "$out/server.log"; exit 1; }
    sleep 0.2
done
eval "$(grep -E '^ *export TINKER_(BASE_URL|API_KEY)=' "$out/server.log")"
export TINKER_BASE_URL TINKER_API_KEY
echo "rtc serve: $TINKER_BASE_URL (log: $out/server.log)"

start=$(date +%s)
python "$out/loop.py" \
    --data recipes/data/sft-json.jsonl --eval-data recipes/data/sft-json.eval.jsonl \
    --steps 12 --batch-size 8 --eval-every 6 --save-every 12 --lr 5e-4 --max-tokens 48 --temperature 0.2 \
    --log "$out/metrics.jsonl" --out main-job
python scripts/main_job_report.py --eval recipes/data/sft-json.eval.jsonl \
    --checkpoints "$out/checkpoints.jsonl" --metrics "$out/metrics.jsonl" --report "$out/report.md"
echo "training and report: $(( $(date +%s) - start )) s"
rtc plot "$out/metrics.jsonl" -o "$out/curves.png"
echo "main job done: $out/report.md, $out/replies.jsonl, $out/metrics.jsonl, $out/checkpoints.jsonl, $out/curves.png"
