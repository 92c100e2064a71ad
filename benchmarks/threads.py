"""Which ``rtc serve --threads`` to default to: torch threads against wall time on a shared machine.

Method, in one process on SmolLM2-135M-Instruct (the server's own Engine and sampler): two
workloads, a training step (forward_backward + optim_step, 8 x 128 tokens, LoRA rank 32) and a
32-row sampling request (16 tokens); each timed in wall time with ``torch.set_num_threads(n)`` for
each ``n`` in ``--threads``, alternating settings rep by rep, median of ``--reps``. Two conditions:
the machine as it is (other users' work included; the load average is printed), and the same with
one more CPU-bound process started by this script (a one-thread matmul loop), which is what a
training loop computing rewards or a second server next to ``rtc serve`` looks like.

    python benchmarks/threads.py --threads 1,2 --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

# A one-thread matmul loop that ends when this process does (however it ends).
BUSY = (
    "import os, torch\ntorch.set_num_threads(1)\na = torch.randn(1024, 1024)\n"
    "parent = os.getppid()\nwhile os.getppid() == parent:\n    a @ a\n"
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    settings = [int(n) for n in args.threads.split(",")]

    from rtc.server.engine import AdamParams, Datum, Engine, LoraSettings
    from rtc.server.losses import check_loss
    from rtc.server.models import prepare_model
    from rtc.server.sampling import SamplingRequest, generate

    engine = Engine(prepare_model("smollm2"), threads=1)
    engine.create_training_adapter("t_1", LoraSettings(32, 0, True, True, True))
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(3, 40000, (129,), generator=generator).tolist() for _ in range(8)]
    data = [Datum(tokens=r[:-1], inputs={"target_tokens": torch.tensor(r[1:])}) for r in rows]
    spec = check_loss("cross_entropy", {})
    request = SamplingRequest(rows[0][:48], 32, 16, 1.0, -1, 1.0, 0, [], [], False, 0)
    model = engine.sampling_weights(None)()

    def train() -> None:
        engine.forward_backward("t_1", data, spec, forward_only=False)
        engine.optim_step("t_1", AdamParams(learning_rate=1e-5))

    def sample() -> None:
        generate(model, engine.tokenizer, request, engine.max_length)

    def measure(label: str) -> None:
        times: dict[tuple[str, int], list[float]] = {}
        for rep in range(args.reps + 1):  # rep 0 warms up
            for n in settings if rep % 2 else settings[::-1]:
                torch.set_num_threads(n)
                for name, work in (("training step 8 x 128", train), ("sample 32 rows x 16 tokens", sample)):
                    start = time.perf_counter()
                    work()
                    if rep:
                        times.setdefault((name, n), []).append(time.perf_counter() - start)
        load = os.getloadavg()[0]
        print(f"\n{label} (load average {load:.1f})")
        print("| workload | " + " | ".join(f"{n} thread{'s' if n > 1 else ''}" for n in settings) + " |")
        print("|---|" + "---|" * len(settings))
        for name in ("training step 8 x 128", "sample 32 rows x 16 tokens"):
            cells = [f"{statistics.median(times[(name, n)]):.2f} s" for n in settings]
            print(f"| {name} | " + " | ".join(cells) + " |")

    print(f"{os.cpu_count()} cores; wall time, median of {args.reps}")
    measure("the machine as it is")
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(2)
        measure("with one more CPU-bound process")
    finally:
        busy.terminate()
        busy.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
