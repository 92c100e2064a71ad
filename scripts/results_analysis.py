"""Split the GRPO math result into format and arithmetic (for docs/results.md).

The loop logs reward and accuracy only. This samples the held-out prompts from the initial weights
and from the last checkpoint of `scripts/results.sh`, and scores every sample with the loop's own
math verifier, which also reports `format` (an answer could be extracted). It imports the generated
loop, so prompts, chat template and verifier are exactly the loop's.

Run after scripts/results.sh: python scripts/results_analysis.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rtc.runner import new_api_key, start_server, stop_server  # noqa: E402

SAMPLES = 2  # per held-out prompt and per model


def load_loop():
    spec = importlib.util.spec_from_file_location("grpo_math", ROOT / "generated" / "grpo-math-qwen3.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


async def score(loop, sampler, fmt, rows) -> dict[str, float]:
    import tinker.types as types

    requests = [
        sampler.sample(
            prompt=types.ModelInput.from_ints(fmt.prompt(loop.as_messages(row["prompt"]), room=64)),
            num_samples=SAMPLES,
            sampling_params=types.SamplingParams(
                max_tokens=64, temperature=1.0, stop=fmt.end_of_turn, seed=i
            ),
        )
        for i, row in enumerate(rows)
    ]
    responses = await asyncio.gather(*requests)
    verdicts = [
        loop.verify(fmt.decode(seq.tokens), row["metadata"])
        for row, response in zip(rows, responses, strict=True)
        for seq in response.sequences
    ]
    n = len(verdicts)
    formatted = sum(v["format"] for v in verdicts)
    correct = sum(v["correct"] for v in verdicts)
    return {
        "samples": n,
        "format": formatted / n,
        "accuracy": correct / n,
        "accuracy_when_formatted": correct / formatted if formatted else 0.0,
    }


async def main() -> None:
    import tinker

    loop = load_loop()
    rows = loop.load_dataset(str(ROOT / "recipes" / "data" / "math-arithmetic.eval.jsonl"))
    checkpoint = json.loads((ROOT / "out/results/grpo/checkpoints.jsonl").read_text().splitlines()[-1])
    service = tinker.ServiceClient()
    base = await service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=32, seed=0)
    trained = await service.create_training_client_from_state(checkpoint["path"])
    fmt = loop.ChatFormat(base.get_tokenizer())
    results = {}
    for name, client in (("initial weights", base), (f"step {checkpoint['step']}", trained)):
        sampler = await client.save_weights_and_get_sampling_client()
        results[name] = await score(loop, sampler, fmt, rows)
        print(name, json.dumps(results[name]))


if __name__ == "__main__":
    key = new_api_key()
    process, url = start_server("smollm2", api_key=key)
    os.environ.update(TINKER_BASE_URL=url, TINKER_API_KEY=key)
    try:
        asyncio.run(main())
    finally:
        stop_server(process)
