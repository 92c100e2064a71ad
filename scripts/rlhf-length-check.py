"""Is the RL stage's reward gain more than length? Samples the held-out prompts from the SFT policy
(stage 1) and the GRPO policy (stage 3), scores every sample with the reward model (stage 2) exactly
as the GRPO loop does (its own RewardModel, imported from the generated loop), and reports per policy:
mean reward and length, the reward/length correlation, the share of answers that end with a question
(the property the preference pairs reward), and the GRPO - SFT reward gain at matched lengths (within
length bins, weighted by the smaller count) and adjusted for length (least squares, reward ~ policy +
length). Needs TINKER_BASE_URL / TINKER_API_KEY of the server the runs used (scripts/rlhf-smollm2.sh
runs it as its last stage).

    python scripts/rlhf-length-check.py --sft OUT/sft/checkpoints.jsonl \
        --grpo OUT/grpo/checkpoints.jsonl --rm OUT/rm/checkpoints.jsonl --out OUT/length-check.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ROOT / "generated" / "rlhf-3-grpo-qwen3.py"


def load_loop():
    spec = importlib.util.spec_from_file_location("rlhf_grpo_loop", LOOP)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def latest(path: str, key: str) -> str:
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    records = [r for r in records if r.get(key)]
    if not records:
        raise SystemExit(f"error: {path} lists no {key}")
    return records[-1][key]


def corr(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    vx, vy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return cov / math.sqrt(vx * vy) if vx > 1e-12 and vy > 1e-12 else None


def length_adjusted_gain(samples: list[dict]) -> float | None:
    """c in reward = a + b * length + c * [policy is GRPO], by least squares (3x3 normal equations)."""
    rows = [(1.0, float(s["length"]), 1.0 if s["policy"] == "grpo" else 0.0) for s in samples]
    ys = [s["reward"] for s in samples]
    a = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(3)]
    for col in range(3):  # Gauss-Jordan with partial pivoting
        pivot = max(range(col, 3), key=lambda i: abs(a[i][col]))
        if abs(a[pivot][col]) < 1e-9:
            return None
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for i in range(3):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * y for x, y in zip(a[i], a[col], strict=True)]
                b[i] -= f * b[col]
    return b[2] / a[2][2]


def matched_gain(samples: list[dict], width: int) -> tuple[float | None, int]:
    """Mean GRPO - SFT reward within length bins of `width` tokens, weighted by the smaller count of
    the two in each bin; and how many samples of each policy that matches."""
    bins: dict[int, dict[str, list[float]]] = {}
    for s in samples:
        bins.setdefault(s["length"] // width, {"sft": [], "grpo": []})[s["policy"]].append(s["reward"])
    total, weight = 0.0, 0
    for group in bins.values():
        k = min(len(group["sft"]), len(group["grpo"]))
        if k:
            diff = sum(group["grpo"]) / len(group["grpo"]) - sum(group["sft"]) / len(group["sft"])
            total, weight = total + k * diff, weight + k
    return (total / weight if weight else None), weight


async def sample_policy(loop, service, state: str, rows: list[dict], args, scorer) -> list[dict]:
    training = await service.create_training_client_from_state(state)
    fmt = loop.chat_format(training.get_info().model_data.model_name, training.get_tokenizer)
    sampler = await training.save_weights_and_get_sampling_client()
    groups = await loop.sample_groups(sampler, fmt, rows, args, args.samples, seed=args.seed)
    verdicts = await loop.score(fmt, rows, groups, args, scorer(fmt))
    out = []
    for row, (prompt, response), group in zip(rows, groups, verdicts, strict=True):
        for sequence, verdict in zip(response.sequences, group, strict=True):
            reply = fmt.reply(prompt, sequence.tokens, sequence.stop_reason)
            answer = reply.answer or ""
            out.append(
                {
                    "prompt": row["prompt"],
                    "answer": answer,
                    "length": verdict["length"],
                    "reward": verdict["reward"],
                    "truncated": 0.0 if reply.ended else 1.0,  # cut at --max-tokens (graded all the same)
                    "asks": answer.rstrip().endswith("?"),
                }
            )
    return out


async def main_async(args) -> dict:
    loop = load_loop()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line.strip()]
    service = loop.tinker.ServiceClient()
    rm = await service.create_sampling_client(model_path=latest(args.rm, "sampler_path"))

    def scorer(fmt):
        return loop.RewardModel(rm, fmt)

    samples = []
    for policy, path in (("sft", args.sft), ("grpo", args.grpo)):
        state = latest(path, "path")
        for s in await sample_policy(loop, service, state, rows, args, scorer):
            samples.append({"policy": policy, "checkpoint": state, **s})
    summary = {}
    for policy in ("sft", "grpo"):
        own = [s for s in samples if s["policy"] == policy]
        summary[policy] = {
            "samples": len(own),
            "reward": sum(s["reward"] for s in own) / len(own),
            "length": sum(s["length"] for s in own) / len(own),
            "reward_length_corr": corr([float(s["length"]) for s in own], [s["reward"] for s in own]),
            "ends_with_question": sum(s["asks"] for s in own) / len(own),
            "truncated": sum(s["truncated"] for s in own) / len(own),
        }
    gain, matched = matched_gain(samples, args.bin)
    summary["gain"] = summary["grpo"]["reward"] - summary["sft"]["reward"]
    summary["gain_at_matched_length"] = gain
    summary["matched_pairs"] = matched
    summary["length_bin"] = args.bin
    summary["gain_adjusted_for_length"] = length_adjusted_gain(samples)
    for policy in ("sft", "grpo"):  # the RM's reward of answers that ask vs those that do not
        for asks in (True, False):
            own = [s["reward"] for s in samples if s["policy"] == policy and s["asks"] == asks]
            key = f"{policy}_reward_{'asking' if asks else 'not_asking'}"
            summary[key] = sum(own) / len(own) if own else None
    return {"summary": summary, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sft", required=True, help="stage 1's checkpoints.jsonl")
    parser.add_argument("--grpo", required=True, help="stage 3's checkpoints.jsonl")
    parser.add_argument("--rm", required=True, help="stage 2's checkpoints.jsonl")
    parser.add_argument("--data", default=str(ROOT / "recipes/data/rlhf-prompts.eval.jsonl"))
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt and policy")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--bin", type=int, default=8, help="length bin width in tokens for matching")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="JSON: the summary and every sample")
    args = parser.parse_args()
    # What the loop's sample_groups and score read: grade cut-off samples too, no length penalty.
    args.temperature, args.grade_truncated, args.length_penalty = 1.0, True, 0.0
    result = asyncio.run(main_async(args))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
