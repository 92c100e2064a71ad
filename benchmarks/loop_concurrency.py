"""Benchmark: what issuing all sample requests of a step at once buys a loop.

The reference loop awaited each rewrite one after another; rtc's loops gather every request of a
step. This measures one step's sampling both ways, side by side in one run, against `rtc serve`
with an added per-request latency that stands in for the network distance to a hosted service.

Method: start `rtc serve --model tiny --latency-ms L`; create one training client and a sampler of
its weights; for each repetition, time (a) `asyncio.gather` over P prompts (each `num_samples=G`)
and (b) the same requests awaited one by one, alternating the order of (a) and (b) between
repetitions; report the median and min of each. Run: `python benchmarks/loop_concurrency.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rtc.runner import new_api_key, start_server, stop_server  # noqa: E402


async def one_step(sampler, prompts, params, group: int, concurrent: bool) -> float:
    started = time.perf_counter()
    if concurrent:
        await asyncio.gather(
            *(sampler.sample(prompt=p, num_samples=group, sampling_params=params) for p in prompts)
        )
    else:
        for prompt in prompts:
            await sampler.sample(prompt=prompt, num_samples=group, sampling_params=params)
    return time.perf_counter() - started


async def measure(args) -> dict[str, list[float]]:
    import tinker
    from tinker import types

    service = tinker.ServiceClient()
    training = await service.create_lora_training_client(base_model="bench", rank=8, seed=0)
    tokenizer = training.get_tokenizer()
    sampler = await training.save_weights_and_get_sampling_client()
    prompts = [
        types.ModelInput.from_ints(
            tokenizer.encode(f"Question {i}: say something.", add_special_tokens=False)
        )
        for i in range(args.prompts)
    ]
    params = types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=0)
    await one_step(sampler, prompts, params, args.group, concurrent=True)  # warm-up
    times: dict[str, list[float]] = {"gather": [], "sequential": []}
    for rep in range(args.reps):
        order = ("gather", "sequential") if rep % 2 == 0 else ("sequential", "gather")
        for name in order:
            times[name].append(
                await one_step(sampler, prompts, params, args.group, concurrent=name == "gather")
            )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency-ms", type=int, default=100, help="added to every server request")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    key = new_api_key()
    process, url = start_server("tiny", latency_ms=args.latency_ms, api_key=key)
    os.environ.update(TINKER_BASE_URL=url, TINKER_API_KEY=key)
    try:
        times = asyncio.run(measure(args))
    finally:
        stop_server(process)
    print(
        f"\nlatency {args.latency_ms} ms, {args.prompts} prompts x {args.group} samples"
        f" x {args.max_tokens} tokens,"
        f" {args.reps} repetitions"
    )
    for name, values in times.items():
        print(f"  {name:10s} median {statistics.median(values):.3f} s  min {min(values):.3f} s")
    speedup = statistics.median(times["sequential"]) / statistics.median(times["gather"])
    print(f"  gather is {speedup:.1f}x faster")


if __name__ == "__main__":
    main()
