"""Benchmark ``rtc serve``: throughput through the real SDK against the same torch code in-process.

What is timed, in one run, side by side:

- ``forward_backward`` + ``optim_step`` (cross_entropy, a batch of ``--batch`` sequences of
  ``--seq-len`` tokens, LoRA rank ``--rank``): through the SDK against a server subprocess
  (submit both, then wait, as loops do), and by calling the server's ``Engine`` directly in
  this process. Tokens/s counts the input tokens of the batch.
- sampling ``--sample-tokens`` new tokens for ``--num-samples`` samples of one prompt (stop
  disabled, so every sample has exactly that many tokens): through the SDK, and by calling
  ``rtc.server.sampling.generate`` directly.

Each measurement is repeated ``--reps`` times after ``--warmup`` untimed runs; the two sides
alternate rep by rep, so drifts of the machine hit both alike, and never run at the same time.
The median is reported. The server and the in-process engine use the same number of torch
threads. ``--latency-ms`` is passed to the server to see how a remote-like delay shows up.

Usage: python benchmarks/server_bench.py --model tiny
       python benchmarks/server_bench.py --model smollm2 --batch 4 --seq-len 64 --sample-tokens 16
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def start_server(model: str, state_dir: str, threads: int, latency_ms: float) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "rtc.server", "--model", model, "--port", "0", "--state-dir", state_dir]
    command += ["--threads", str(threads), "--latency-ms", str(latency_ms), "--quiet"]
    env = {**os.environ, "RTC_SERVE_API_KEY": "tml-local"}  # the key the clients below send
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            match = re.search(r"TINKER_BASE_URL=(\S+)", line)
            if match:
                found["url"] = match.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(300)
    if "url" not in found:
        process.kill()
        raise SystemExit("the server did not start")
    return process, found["url"]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def side_by_side(sdk: Callable[[], object], local: Callable[[], object], reps: int, warmup: int):
    for _ in range(warmup):
        sdk()
        local()
    sdk_times, local_times = [], []
    for _ in range(reps):
        sdk_times.append(timed(sdk))
        local_times.append(timed(local))
    return statistics.median(sdk_times), statistics.median(local_times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, smollm2 or a model directory")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--sample-tokens", type=int, default=64)
    parser.add_argument("--num-samples", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()

    import tinker
    import torch
    from tinker import types

    from rtc.server.engine import AdamParams, Datum, Engine, LoraSettings
    from rtc.server.losses import check_loss
    from rtc.server.models import prepare_model
    from rtc.server.sampling import SamplingRequest, generate

    model_dir = prepare_model(args.model)
    with tempfile.TemporaryDirectory(prefix="rtc-bench-") as state_dir:
        process, url = start_server(args.model, state_dir, args.threads, args.latency_ms)
        try:
            engine = Engine(model_dir, threads=args.threads)
            generator = torch.Generator().manual_seed(0)
            vocab = min(engine.vocab_size, 500)
            rows = [
                torch.randint(3, vocab, (args.seq_len + 1,), generator=generator).tolist()
                for _ in range(args.batch)
            ]
            prompt = rows[0][:16]
            adam = AdamParams(learning_rate=1e-4, eps=1e-8)

            # In-process: the server's own engine and sampler, no HTTP.
            settings = LoraSettings(
                rank=args.rank, seed=0, train_mlp=True, train_attn=True, train_unembed=True
            )
            engine.create_training_adapter("bench", settings)
            spec = check_loss("cross_entropy", {})
            local_data = [
                Datum(
                    tokens=r[:-1],
                    inputs={"target_tokens": torch.tensor(r[1:]), "weights": torch.ones(args.seq_len)},
                )
                for r in rows
            ]

            def local_step() -> None:
                engine.forward_backward("bench", local_data, spec, forward_only=False)
                engine.optim_step("bench", adam)

            request = SamplingRequest(
                prompt=prompt,
                num_samples=args.num_samples,
                max_tokens=args.sample_tokens,
                temperature=1.0,
                top_k=-1,
                top_p=1.0,
                seed=0,
                stop_strings=[],
                stop_token_ids=[],
                prompt_logprobs=False,
                topk_prompt_logprobs=0,
            )

            def local_sample() -> None:
                generate(engine.sampling_weights(None)(), engine.tokenizer, request, engine.max_length)

            # Through the SDK.
            service = tinker.ServiceClient(base_url=url, api_key="tml-local")
            client = service.create_lora_training_client(
                base_model="bench/model", rank=args.rank, seed=0
            ).result()
            sdk_data = [
                types.Datum(
                    model_input=types.ModelInput.from_ints(r[:-1]),
                    loss_fn_inputs={"target_tokens": r[1:], "weights": [1.0] * args.seq_len},
                )
                for r in rows
            ]
            sdk_adam = types.AdamParams(learning_rate=1e-4, eps=1e-8)

            def sdk_step() -> None:
                fb = client.forward_backward(sdk_data, "cross_entropy")
                optim = client.optim_step(sdk_adam)
                fb.result()
                optim.result()

            sampler = service.create_sampling_client(base_model="bench/model").result()
            params = types.SamplingParams(max_tokens=args.sample_tokens, temperature=1.0, seed=0, stop=[])

            def sdk_sample() -> None:
                sampler.sample(types.ModelInput.from_ints(prompt), args.num_samples, params).result()

            fb_sdk, fb_local = side_by_side(sdk_step, local_step, args.reps, args.warmup)
            sa_sdk, sa_local = side_by_side(sdk_sample, local_sample, args.reps, args.warmup)
        finally:
            process.terminate()
            process.wait(timeout=30)

    train_tokens = args.batch * args.seq_len
    sampled = args.num_samples * args.sample_tokens
    print(
        f"model={args.model} threads={args.threads} batch={args.batch}x{args.seq_len} rank={args.rank} "
        f"sampling={args.num_samples}x{args.sample_tokens} reps={args.reps} latency_ms={args.latency_ms}"
    )
    print()
    print("| operation | through SDK + server | in-process engine | server overhead |")
    print("|---|---|---|---|")
    for label, sdk_s, local_s, tokens in (
        ("forward_backward + optim_step", fb_sdk, fb_local, train_tokens),
        ("sample", sa_sdk, sa_local, sampled),
    ):
        print(
            f"| {label} | {sdk_s * 1000:.1f} ms ({tokens / sdk_s:,.0f} tok/s) "
            f"| {local_s * 1000:.1f} ms ({tokens / local_s:,.0f} tok/s) "
            f"| {(sdk_s - local_s) * 1000:+.1f} ms ({sdk_s / local_s:.2f}x) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
