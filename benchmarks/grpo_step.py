"""A GRPO step through the SDK and ``rtc serve``: this engine against an older one, and the FLOP limit.

What one step does, as a GRPO loop does it: snapshot the weights for sampling
(``save_weights_and_get_sampling_client``), sample ``P`` prompts x ``G`` samples x ``T`` tokens with
every request issued at once, then one ``forward_backward`` (importance_sampling on the sampled
tokens) and one ``optim_step``. Stops are disabled, so every sample has exactly ``T`` tokens and both
engines do the same work.

Two servers run as subprocesses with the same model, threads and dtype: this checkout ("new") and
the engine of an older commit ("old", ``--old-ref``, default the main commit before batched
decoding), extracted with ``git archive`` and run from it. They run one after the other (the old
engine needs up to 13 GB for a 32-datum step, and two servers at once did not fit this 23 GB machine
next to other work), in the order old, new for the first shape and new, old for the next, and so on.

Each phase is timed two ways: wall time, and the CPU time the server process used (``/proc/<pid>/stat``,
all its threads). With one torch thread, CPU time is what the step costs when the process has a core
to itself; wall time also counts waiting for a core, which on a shared machine is most of the noise.

The FLOP limit is computed in this process, in the same run: FLOPs counted by torch's
``FlopCounterMode`` (plus attention, which it does not count on the CPU) for the work the step needs
(sampling: each prompt's prefill and each sample's decode steps on merged weights; training: each datum
alone, unpadded, LoRA included), divided by the fp32 matmul peak of one core measured here (the best of
several ``[2048 x 576] @ [576 x 1536]`` products, in thread CPU time, before and after the steps).

Usage (about 25 minutes here for the default shapes):
    python benchmarks/grpo_step.py --model smollm2 --shapes 4x8x64,8x8x64 --steps 2
Results: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD_REF = "11d5a37"  # main before cross-request batching (per-request decode through peft)
START_TIMEOUT_S = 300
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ----- servers ----------------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    url: str
    output: list[str] = field(default_factory=list)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (all threads)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def peak_rss_gb(self) -> float:
        """The most resident memory the server process has used so far."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024 / 1024
        return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def old_tree(ref: str, into: Path) -> Path:
    """The ``rtc`` package of commit ``ref`` laid out for PYTHONPATH (compiler/ is ``rtc``)."""
    source = into / "src"
    source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", ref, "compiler", "server", "templates"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    lib = into / "lib"
    shutil.copytree(source / "compiler", lib / "rtc")
    shutil.copytree(source / "server", lib / "rtc" / "server")
    shutil.copytree(source / "templates", lib / "rtc" / "templates")
    return lib


def start(name: str, args, state_dir: Path, pythonpath: Path | None, extra: list[str]) -> Server:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    command = [sys.executable, "-m", "rtc.server", "--model", args.model, "--port", "0"]
    command += ["--state-dir", str(state_dir), "--threads", str(args.threads), "--quiet", *extra]
    process = subprocess.Popen(
        command, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    server = Server(name, process, "")
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            server.output.append(line)
            match = re.search(r"TINKER_BASE_URL=(\S+)", line)
            if match:
                server.url = match.group(1)
            if "TINKER_API_KEY=" in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(START_TIMEOUT_S)
    if not server.url:
        process.kill()
        raise RuntimeError(f"{name} server did not start:\n" + "".join(server.output))
    return server


# ----- the FLOP limit ---------------------------------------------------------------------------


def flop_counter():
    """FlopCounterMode that also counts the CPU flash-attention kernels (forward and backward)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten

    def forward(query, key, value, *args, **kwargs):
        return sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, **kwargs):
        return sdpa_backward_flop_count(grad_out, query, key, value)

    return FlopCounterMode(
        display=False,
        custom_mapping={
            aten._scaled_dot_product_flash_attention_for_cpu: forward,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: backward,
        },
    )


def matmul_peak() -> float:
    """fp32 GFLOP/s of one thread on a model-sized product, in thread CPU time (best of 5)."""
    import torch

    a, w = torch.randn(2048, 576), torch.randn(1536, 576)
    torch.nn.functional.linear(a, w)
    best = 0.0
    for _ in range(5):
        start = time.thread_time()
        for _ in range(4):
            torch.nn.functional.linear(a, w)
        best = max(best, 4 * 2 * 2048 * 576 * 1536 / (time.thread_time() - start) / 1e9)
    return best


class FlopModel:
    """FLOPs of sampling and training steps, counted once per distinct length and cached."""

    def __init__(self, model_dir: Path, rank: int):
        import torch

        from rtc.server.engine import Engine, LoraSettings

        torch.set_num_threads(1)
        self.engine = Engine(model_dir, threads=1)
        self.engine.create_training_adapter("count", LoraSettings(rank, 0, True, True, True))
        self.engine.snapshot_for_sampling("count", "count_sampler")
        self._sample: dict[tuple[int, int], tuple[int, int]] = {}
        self._train: dict[int, int] = {}

    def sample_flops(self, prompt: list[int], tokens: int, samples: int) -> int:
        """Prefill once, then ``samples`` rows of ``tokens`` decode steps (merged weights)."""
        from rtc.server.sampling import Generation, SamplingRequest

        key = (len(prompt), tokens)
        if key not in self._sample:
            request = SamplingRequest(prompt, 1, tokens, 1.0, -1, 1.0, 0, [], [], False, 0)
            model = self.engine.sampling_weights("count_sampler")()
            gen = Generation(request, self.engine.tokenizer, self.engine.max_length)
            with flop_counter() as prefill:
                while not gen.prompt_done:
                    gen.prefill(model, self.engine.vocab_size)
            from rtc.server.sampling import DecodeBatch

            batch = DecodeBatch()
            batch.join([gen])
            with flop_counter() as decode:
                while batch.rows:
                    batch.step(model)
            self._sample[key] = (prefill.get_total_flops(), decode.get_total_flops())
        prefill, decode = self._sample[key]
        return prefill + samples * decode

    def train_flops(self, length: int) -> int:
        """forward + backward of one datum of ``length`` input tokens, alone (no padding)."""
        import torch

        from rtc.server.engine import Datum
        from rtc.server.losses import check_loss

        if length not in self._train:
            datum = Datum(
                tokens=[5] * length,
                inputs={
                    "target_tokens": torch.full((length,), 7),
                    "logprobs": torch.zeros(length),
                    "advantages": torch.ones(length),
                },
            )
            with flop_counter() as counter:
                self.engine.forward_backward("count", [datum], check_loss("importance_sampling", {}), False)
            self._train[length] = counter.get_total_flops()
        return self._train[length]


# ----- one GRPO step ----------------------------------------------------------------------------


def prompts_of(tokenizer, count: int) -> list[list[int]]:
    rows = [
        json.loads(line) for line in (ROOT / "recipes/data/math-arithmetic.jsonl").read_text().splitlines()
    ]
    out = []
    for row in rows[:count]:
        prompt = row["prompt"]
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out.append(tokenizer.encode(text, add_special_tokens=False))
    return out


@dataclass
class StepTimes:
    snapshot_wall: float  # part of sample_wall: save_weights_and_get_sampling_client
    sample_wall: float
    sample_cpu: float
    train_wall: float
    train_cpu: float
    logprob_gap: float  # mean |trainer - sampler| logprob on sampled tokens, before the update
    outside_clip: float  # fraction of tokens whose importance ratio is outside [0.8, 1.2]


async def grpo_step(server: Server, client, prompts, samples: int, tokens: int, step: int) -> StepTimes:
    from tinker import types

    params = [
        types.SamplingParams(max_tokens=tokens, temperature=1.0, seed=1000 * step + i, stop=[])
        for i in range(len(prompts))
    ]
    cpu, start = server.cpu_seconds(), time.perf_counter()
    sampler = await client.save_weights_and_get_sampling_client()
    snapshot = time.perf_counter() - start
    responses = await asyncio.gather(
        *[
            sampler.sample(types.ModelInput.from_ints(p), samples, sp)
            for p, sp in zip(prompts, params, strict=True)
        ]
    )
    sample_wall, sample_cpu = time.perf_counter() - start, server.cpu_seconds() - cpu

    data, sampled = [], []
    for prompt, response in zip(prompts, responses, strict=True):
        for index, sequence in enumerate(response.sequences):
            full = prompt + list(sequence.tokens)
            advantage = 0.5 if index % 2 == 0 else -0.5
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": full[1:],
                        "logprobs": [0.0] * (len(prompt) - 1) + list(sequence.logprobs),
                        "advantages": [0.0] * (len(prompt) - 1) + [advantage] * len(sequence.tokens),
                    },
                )
            )
            sampled.append((len(prompt) - 1, list(sequence.logprobs)))
    cpu, start = server.cpu_seconds(), time.perf_counter()
    forward = client.forward_backward(data, "importance_sampling")
    optim = client.optim_step(types.AdamParams(learning_rate=1e-5))
    result = await forward
    await optim
    train_wall, train_cpu = time.perf_counter() - start, server.cpu_seconds() - cpu

    gaps, outside = [], 0
    for output, (offset, behaviour) in zip(result.loss_fn_outputs, sampled, strict=True):
        trainer = output["logprobs"].tolist()[offset:]
        for t, b in zip(trainer, behaviour, strict=True):
            gaps.append(abs(t - b))
            outside += not 0.8 <= pow(2.718281828459045, t - b) <= 1.2
    return StepTimes(
        snapshot, sample_wall, sample_cpu, train_wall, train_cpu, statistics.fmean(gaps), outside / len(gaps)
    )


async def run_server(server: Server, tokenizer, shape: tuple[int, int, int], steps: int, rank: int):
    """One warm-up step (not reported) and ``steps`` timed GRPO steps on one server."""
    import tinker

    n_prompts, samples, tokens = shape
    prompts = prompts_of(tokenizer, n_prompts)
    service = tinker.ServiceClient(base_url=server.url, api_key="tml-local")
    client = await service.create_lora_training_client(base_model="bench/grpo", rank=rank, seed=0)
    results = []
    for step in range(steps + 1):
        times = await grpo_step(server, client, prompts, samples, tokens, step)
        print(f"  {shape} step {step} {server.name}: {times}", flush=True)
        if step > 0:
            results.append(times)
    return results, server.peak_rss_gb()


def median(values) -> float:
    return statistics.median(values)


def report(shape, sample_flops, train_flops, peak, results, rss) -> list[str]:
    n_prompts, samples, tokens = shape
    label = f"{n_prompts}x{samples}x{tokens}"
    sample_limit = sample_flops / 1e9 / peak
    train_limit = train_flops / 1e9 / peak
    lines = []
    row = {}
    for name, steps in results.items():
        row[name] = {
            "sample_wall": median(t.sample_wall for t in steps),
            "sample_cpu": median(t.sample_cpu for t in steps),
            "train_wall": median(t.train_wall for t in steps),
            "train_cpu": median(t.train_cpu for t in steps),
            "gap": max(t.logprob_gap for t in steps),
            "clip": max(t.outside_clip for t in steps),
        }
    for name in results:
        row[name]["rss"] = rss[name]
    for name in results:
        r = row[name]
        step_wall = r["sample_wall"] + r["train_wall"]
        step_cpu = r["sample_cpu"] + r["train_cpu"]
        lines.append(
            f"| {label} | {name} | {r['sample_cpu']:.1f} s ({r['sample_cpu'] / sample_limit:.2f}x) "
            f"/ {r['sample_wall']:.1f} s | {r['train_cpu']:.1f} s ({r['train_cpu'] / train_limit:.2f}x) "
            f"/ {r['train_wall']:.1f} s | {step_cpu:.1f} s / {step_wall:.1f} s "
            f"| {r['gap']:.1e} / {r['clip']:.3f} | {r['rss']:.1f} GB |"
        )
    if "old" in row and "new" in row:
        old, new = row["old"], row["new"]

        def ratio(key_cpu, key_wall):
            return f"{old[key_cpu] / new[key_cpu]:.2f}x / {old[key_wall] / new[key_wall]:.2f}x"

        step = (
            f"{(old['sample_cpu'] + old['train_cpu']) / (new['sample_cpu'] + new['train_cpu']):.2f}x / "
            f"{(old['sample_wall'] + old['train_wall']) / (new['sample_wall'] + new['train_wall']):.2f}x"
        )
        lines.append(
            f"| {label} | new faster by | {ratio('sample_cpu', 'sample_wall')} | "
            f"{ratio('train_cpu', 'train_wall')} | {step} | | |"
        )
    lines.append(
        f"| {label} | FLOP limit | {sample_limit:.1f} s ({sample_flops / 1e9:.0f} GFLOP) | "
        f"{train_limit:.1f} s ({train_flops / 1e9:.0f} GFLOP) | {sample_limit + train_limit:.1f} s | | |"
    )
    return lines


async def main_async(args) -> int:
    import gc
    import logging

    # Clients of a server that was stopped keep heartbeating; their warnings are noise here.
    logging.getLogger("tinker").setLevel(logging.ERROR)

    from transformers import AutoTokenizer

    from rtc.server.models import prepare_model

    model_dir = prepare_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]

    # FLOPs first, then free that model before any server starts.
    flops = FlopModel(model_dir, args.rank)
    counted = {}
    for shape in shapes:
        n_prompts, samples, tokens = shape
        prompts = prompts_of(tokenizer, n_prompts)
        counted[shape] = (
            sum(flops.sample_flops(p, tokens, samples) for p in prompts),
            samples * sum(flops.train_flops(len(p) + tokens - 1) for p in prompts),
        )
    del flops
    gc.collect()
    peaks = [matmul_peak()]

    table = []
    with tempfile.TemporaryDirectory(prefix="rtc-grpo-bench-") as tmp:
        tmp_path = Path(tmp)
        lib = old_tree(args.old_ref, tmp_path / "old-tree") if args.old_ref else None
        for index, shape in enumerate(shapes):
            engines = [("new", None, ["--dtype", args.dtype])]
            if lib is not None:
                engines.insert(0, ("old", lib, []))
            if index % 2:
                engines.reverse()
            results, rss = {}, {}
            for name, pythonpath, extra in engines:
                server = start(name, args, tmp_path / f"{name}-{index}", pythonpath, extra)
                try:
                    results[name], rss[name] = await run_server(
                        server, tokenizer, shape, args.steps, args.rank
                    )
                finally:
                    server.stop()
            peaks.append(matmul_peak())
            table.append((shape, *counted[shape], results, rss))
    peak = max(peaks)
    load = os.getloadavg()
    print()
    print(
        f"model={args.model} threads={args.threads} dtype={args.dtype} rank={args.rank} steps={args.steps} "
        f"old_ref={args.old_ref or '-'} matmul peak={peak:.1f} GFLOP/s "
        f"(measured {', '.join(f'{p:.0f}' for p in peaks)}) load average at the end={load[0]:.1f}"
    )
    print()
    print(
        "| shape PxGxT | engine | sampling: server CPU (x limit) / wall "
        "| training: server CPU (x limit) / wall | step: CPU / wall | logprob gap / outside clip "
        "| peak server memory |"
    )
    print("|---|---|---|---|---|---|---|")
    for shape, sample_flops, train_flops, results, rss in table:
        for line in report(shape, sample_flops, train_flops, peak, results, rss):
            print(line)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", help="smollm2, tiny or a model directory")
    parser.add_argument(
        "--shapes", default="4x8x64,8x8x64", help="prompts x samples x tokens, comma-separated"
    )
    parser.add_argument(
        "--steps", type=int, default=2, help="timed steps per shape and engine (after one warm-up)"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16"], help="the new engine's"
    )
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument(
        "--old-ref", default=OLD_REF, help="git ref of the engine to compare with; '' for none"
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
