"""How far sampler and trainer logprobs drift apart with ``rtc serve --dtype bfloat16``, and what that
does to the importance ratio of RL losses; and what bf16 costs or saves in time on this CPU.

Method, in one process on SmolLM2-135M-Instruct, one torch thread:

1. A LoRA adapter (rank 32, all linear layers) is trained for a few SFT steps in float32 on the
   JSON-extraction demonstrations, so the adapter is a realistic small update rather than zeros.
2. The same adapter is loaded into a float32 engine and a bfloat16 engine, and each makes its
   sampler the way the server does (a snapshot merged into a copy of the base weights).
3. The bf16 sampler samples ``--prompts`` x ``--samples`` completions of ``--tokens`` tokens at
   temperature 1 (stops off); its logprobs are the behaviour policy of an RL step.
4. The trainers score the same tokens (``forward``): bf16 (bf16 base weights + fp32 LoRA, what a
   ``--dtype bfloat16`` server trains with) and fp32; the fp32 sampler scores them too.

For each pair it reports the mean and largest |logprob difference| per sampled token, and the
importance ratio ``exp(trainer - sampler)`` that importance_sampling / ppo / cispo would see before
any update (ideally exactly 1): its mean, standard deviation and the fraction of tokens outside
PPO's default clip [0.8, 1.2]. Timing: one 32-row decode step and one 8 x 128 training step in each
dtype, alternating, in thread CPU time.

    python benchmarks/bf16_divergence.py
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--sft-steps", type=int, default=6)
    args = parser.parse_args()

    from rtc.server.engine import AdamParams, Datum, Engine, LoraSettings
    from rtc.server.losses import check_loss
    from rtc.server.models import prepare_model
    from rtc.server.sampling import SamplingRequest, generate_many

    torch.set_num_threads(1)
    model_dir = prepare_model("smollm2")
    fp32 = Engine(model_dir, threads=1)
    bf16 = Engine(model_dir, threads=1, dtype="bfloat16")
    tokenizer = fp32.tokenizer
    rows = [json.loads(line) for line in (ROOT / "recipes/data/sft-json.jsonl").read_text().splitlines()]

    def render(prompt: str) -> list[int]:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return tokenizer.encode(text, add_special_tokens=False)

    # 1. A trained adapter (float32).
    fp32.create_training_adapter("sft_1", LoraSettings(32, 0, True, True, True))
    cross_entropy = check_loss("cross_entropy", {})
    for step in range(args.sft_steps):
        batch = []
        for row in rows[8 * step : 8 * step + 8]:
            prompt = render(row["prompt"])
            completion = tokenizer.encode(row["completion"], add_special_tokens=False) + [
                tokenizer.eos_token_id
            ]
            tokens = prompt + completion
            weights = torch.tensor([0.0] * (len(prompt) - 1) + [1.0] * len(completion))
            batch.append(
                Datum(
                    tokens=tokens[:-1], inputs={"target_tokens": torch.tensor(tokens[1:]), "weights": weights}
                )
            )
        fp32.forward_backward("sft_1", batch, cross_entropy, forward_only=False)
        fp32.optim_step("sft_1", AdamParams(learning_rate=5e-4, eps=1e-8))

    # 2. The same adapter in both engines, and their merged samplers.
    with tempfile.TemporaryDirectory() as tmp:
        fp32.save_adapter("sft_1", Path(tmp), False, "bench")
        bf16.load_training_adapter(Path(tmp), "sft_1", with_optimizer=False)
    fp32.snapshot_for_sampling("sft_1", "sampler_1")
    bf16.snapshot_for_sampling("sft_1", "sampler_1")

    # 3. Sample from the bf16 sampler.
    prompts = [render(row["prompt"]) for row in rows[100 : 100 + args.prompts]]
    requests = [
        SamplingRequest(p, args.samples, args.tokens, 1.0, -1, 1.0, i, [], [], False, 0)
        for i, p in enumerate(prompts)
    ]
    results = generate_many(bf16.sampling_weights("sampler_1")(), tokenizer, requests, bf16.max_length)
    sequences = [
        (prompt, list(s.tokens), list(s.logprobs))
        for prompt, result in zip(prompts, results, strict=True)
        for s in result.sequences
    ]

    # 4. Score the same tokens.
    def trainer(engine: Engine) -> list[list[float]]:
        data = [
            Datum(tokens=(p + t)[:-1], inputs={"target_tokens": torch.tensor((p + t)[1:])})
            for p, t, _ in sequences
        ]
        out = engine.forward_backward("sft_1", data, cross_entropy, forward_only=True).logprobs
        return [lp[len(p) - 1 :].tolist() for lp, (p, _, _) in zip(out, sequences, strict=True)]

    def sampler(engine: Engine) -> list[list[float]]:
        scored = []
        for p, t, _ in sequences:
            request = SamplingRequest(p + t, 1, 1, 1.0, -1, 1.0, 0, [], [], True, 0)
            result = generate_many(
                engine.sampling_weights("sampler_1")(), tokenizer, [request], engine.max_length
            )[0]
            scored.append(result.prompt_logprobs[len(p) :])
        return scored

    behaviour = [lp for _, _, lp in sequences]
    views = {
        "bf16 sampler (merged)": behaviour,
        "bf16 trainer (bf16 base + fp32 LoRA)": trainer(bf16),
        "fp32 trainer": trainer(fp32),
        "fp32 sampler (merged)": sampler(fp32),
    }

    def compare(a: list[list[float]], b: list[list[float]]) -> str:
        diffs = [y - x for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True)]
        ratios = [math.exp(d) for d in diffs]
        outside = sum(not 0.8 <= r <= 1.2 for r in ratios) / len(ratios)
        return (
            f"| {statistics.fmean(abs(d) for d in diffs):.4f} | {max(abs(d) for d in diffs):.3f} | "
            f"{statistics.fmean(ratios):.4f} | {statistics.pstdev(ratios):.4f} | {100 * outside:.1f}% |"
        )

    tokens = sum(len(lp) for lp in behaviour)
    print(f"SmolLM2-135M-Instruct, adapter rank 32 after {args.sft_steps} SFT steps; {tokens} sampled tokens")
    print()
    print(
        "| behaviour (sampler) | scored by (trainer) | mean abs logprob gap | largest | mean ratio "
        "| ratio std | outside [0.8, 1.2] |"
    )
    print("|---|---|---|---|---|---|---|")
    for name_a, name_b in (
        ("bf16 sampler (merged)", "bf16 trainer (bf16 base + fp32 LoRA)"),
        ("bf16 sampler (merged)", "fp32 trainer"),
        ("fp32 sampler (merged)", "fp32 trainer"),
        ("bf16 trainer (bf16 base + fp32 LoRA)", "fp32 trainer"),
    ):
        print(f"| {name_a} | {name_b} " + compare(views[name_a], views[name_b]))

    # Timing: a 32-row decode step and an 8 x 128 training step per dtype, alternating.
    generator = torch.Generator().manual_seed(0)
    rows_tokens = [torch.randint(3, 40000, (129,), generator=generator).tolist() for _ in range(8)]
    train_data = [Datum(tokens=r[:-1], inputs={"target_tokens": torch.tensor(r[1:])}) for r in rows_tokens]
    decode_request = [SamplingRequest(prompts[0], 32, 8, 1.0, -1, 1.0, 0, [], [], False, 0)]
    timings: dict[str, list[float]] = {}
    for _ in range(2):
        for name, engine in (("float32", fp32), ("bfloat16", bf16)):
            start = time.thread_time()
            generate_many(
                engine.sampling_weights("sampler_1")(), tokenizer, decode_request, engine.max_length
            )
            timings.setdefault(f"{name} sample 32 x 8 tokens", []).append(time.thread_time() - start)
            start = time.thread_time()
            engine.forward_backward("sft_1", train_data, cross_entropy, forward_only=False)
            timings.setdefault(f"{name} forward_backward 8 x 128", []).append(time.thread_time() - start)
    print()
    for key, values in timings.items():
        print(f"{key}: {min(values):.2f} s CPU (best of {len(values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
