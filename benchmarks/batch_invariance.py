"""How often does batching change what a seeded request samples? (SmolLM2, in-process.)

A row's logits in a decode batch equal its logits alone only up to float rounding (the CPU's
matmul kernels round differently for different row counts; padded attention sums in another
order), so a draw can change when its uniform falls within about 1e-6 of a boundary between two
tokens, and the rest of that sample then differs. This measures how often that happens on a real
model: ``--prompts`` GRPO prompts (the arithmetic set, chat template) x ``--samples`` samples x
``--tokens`` tokens at temperature 1, stops off, each request decoded alone (one after another
through the server's Scheduler) and then all of them together (one batch); it counts identical
samples and, over the tokens both runs share, the largest logprob difference.

    python benchmarks/batch_invariance.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    from rtc.server.engine import Engine
    from rtc.server.models import prepare_model
    from rtc.server.sampling import SamplingRequest
    from rtc.server.scheduler import Scheduler

    engine = Engine(prepare_model("smollm2"), threads=1)
    tokenizer = engine.tokenizer
    rows = [
        json.loads(line) for line in (ROOT / "recipes/data/math-arithmetic.jsonl").read_text().splitlines()
    ]
    requests = []
    for i, row in enumerate(rows[: args.prompts]):
        prompt = row["prompt"]
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        requests.append(
            SamplingRequest(tokens, args.samples, args.tokens, 1.0, -1, 1.0, 100 + i, [], [], False, 0)
        )
    scheduler = Scheduler(engine)
    try:
        alone = [scheduler.sample(r, None).result() for r in requests]
        futures = [scheduler.sample(r, None) for r in requests]
        together = [f.result() for f in futures]
        rows_per_step = scheduler.stats["decode_rows"] / max(1, scheduler.stats["decode_steps"])
    finally:
        scheduler.close()
    same, total, gap, first = 0, 0, 0.0, []
    for a, b in zip(alone, together, strict=True):
        for sa, sb in zip(a.sequences, b.sequences, strict=True):
            total += 1
            pairs = enumerate(zip(sa.tokens, sb.tokens, strict=True))
            shared = next((i for i, (x, y) in pairs if x != y), len(sa.tokens))
            same += shared == len(sa.tokens)
            if shared < len(sa.tokens):
                first.append(shared)
            common = zip(sa.logprobs[:shared], sb.logprobs[:shared], strict=True)
            gap = max([gap] + [abs(x - y) for x, y in common])
    print(
        f"{same}/{total} samples identical alone and batched ({args.prompts} prompts x {args.samples} "
        f"samples x {args.tokens} tokens, temperature 1); first differing token of the others at "
        f"{sorted(first)}; largest logprob difference over shared tokens {gap:.1e}; "
        f"average rows per decode step {rows_per_step:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
