"""The main job's before/after table: base weights against the trained checkpoint on held-out prompts.

Run by scripts/main-job.sh after the loop, against the same ``rtc serve`` (TINKER_BASE_URL and
TINKER_API_KEY set). It samples every held-out prompt once from the base model and once from the
last checkpoint in checkpoints.jsonl, greedily (temperature 0, so the table is reproducible), with
the prompt rendered as the loop renders it (the model's chat template) and stopped at the end of
turn, and scores each reply:

- valid: the whole reply is one JSON object with exactly the keys name, age and city;
- right: valid, and all three values equal the row's completion.

It prints the table, the first two held-out rows side by side (always rows 1 and 2: no sample is
picked), and the loss curve from metrics.jsonl, writes the same text to --report, and every reply
with its scores to replies.jsonl beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

FIELDS = ("name", "age", "city")


def load_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(reply: str, expected: dict) -> dict[str, bool]:
    try:
        value = json.loads(reply)
    except ValueError:
        value = None
    valid = isinstance(value, dict) and set(value) == set(FIELDS)
    out = {"valid": valid}
    for field in FIELDS:
        out[field] = valid and value[field] == expected[field]
    out["right"] = valid and all(out[field] for field in FIELDS)
    return out


def curve(metrics: list[dict]) -> list[str]:
    train = [(m["step"], m["train/loss"]) for m in metrics if m.get("train/loss") is not None]
    held = [(m["step"], m["eval/loss"]) for m in metrics if m.get("eval/loss") is not None]
    lines = ["loss per token (train, by step):"]
    lines.append("  " + " ".join(f"{loss:.2f}" for _, loss in train))
    lines.append("held-out loss per token: " + ", ".join(f"step {step} {loss:.3f}" for step, loss in held))
    return lines


async def sample_all(sampler, prompts: list[list[int]], stop: list[int], max_tokens: int) -> list[list[int]]:
    from tinker import types

    params = types.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=stop)
    responses = await asyncio.gather(
        *[
            sampler.sample(prompt=types.ModelInput.from_ints(p), num_samples=1, sampling_params=params)
            for p in prompts
        ]
    )
    return [list(r.sequences[0].tokens) for r in responses]


async def report(args) -> list[str]:
    import tinker

    rows = load_jsonl(args.eval)
    checkpoint = load_jsonl(args.checkpoints)[-1]
    service = tinker.ServiceClient()
    base = await service.create_sampling_client(base_model=args.model)
    trained_client = await service.create_training_client_from_state(checkpoint["path"])
    trained = await trained_client.save_weights_and_get_sampling_client()
    # The training client's tokenizer is the server's local copy (a base model name would send
    # the SDK to the Hugging Face hub).
    tokenizer = trained_client.get_tokenizer()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stop = [end] if isinstance(end, int) and end != tokenizer.unk_token_id else [tokenizer.eos_token_id]

    prompts = []
    for row in rows:
        messages = (
            row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]
        )
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    before, after = await asyncio.gather(
        sample_all(base, prompts, stop, args.max_tokens), sample_all(trained, prompts, stop, args.max_tokens)
    )
    replies = {
        "base": [tokenizer.decode(t, skip_special_tokens=True).strip() for t in before],
        "trained": [tokenizer.decode(t, skip_special_tokens=True).strip() for t in after],
    }
    expected = [json.loads(row["completion"]) for row in rows]
    n = len(rows)
    with open(args.report.with_name("replies.jsonl"), "w", encoding="utf-8") as handle:
        for index, row in enumerate(rows):
            record = {"row": index + 1, "prompt": row["prompt"], "wanted": row["completion"]}
            for name in ("base", "trained"):
                record[name] = replies[name][index]
                record[f"{name}_scores"] = score(replies[name][index], expected[index])
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    lines = [
        f"== before / after on the {n} held-out rows of {args.eval} (greedy, same prompts)",
        "",
        "| weights | valid JSON (keys name, age, city) | all three fields right | name | age | city |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in (("base", "base model"), ("trained", f"trained, step {checkpoint['step']}")):
        scores = [score(reply, want) for reply, want in zip(replies[name], expected, strict=True)]

        def count(key, scores=scores):
            hits = sum(s[key] for s in scores)
            return f"{hits}/{n} ({100 * hits / n:.0f}%)"

        lines.append(
            f"| {label} | {count('valid')} | {count('right')} | "
            + " | ".join(count(f) for f in FIELDS)
            + " |"
        )
    lines += ["", "the first two held-out rows:"]
    for index in range(min(2, n)):
        prompt = rows[index]["prompt"]
        lines.append(
            f"  prompt:  {prompt if isinstance(prompt, str) else prompt[-1]['content']}".replace("\n", " ")
        )
        lines.append(f"  base:    {replies['base'][index]!r}")
        lines.append(f"  trained: {replies['trained'][index]!r}")
        lines.append(f"  wanted:  {rows[index]['completion']!r}")
    lines += [""] + curve(load_jsonl(args.metrics))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--eval", type=Path, required=True, help="held-out JSONL ({prompt, completion})")
    parser.add_argument("--checkpoints", type=Path, required=True, help="the run's checkpoints.jsonl")
    parser.add_argument("--metrics", type=Path, required=True, help="the run's metrics.jsonl")
    parser.add_argument("--report", type=Path, required=True, help="write the report here too")
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct", help="base model name")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    lines = asyncio.run(report(args))
    text = "\n".join(lines) + "\n"
    args.report.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
