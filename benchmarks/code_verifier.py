"""What does the code sandbox cost per completion? The sandboxed verifier against another one (main's).

Scores one GRPO step's worth of completions (--completions, a correct solution with four asserts)
through verify() from a pool of --workers threads, as a generated loop does (VERIFY_WORKERS = 8),
and single calls one at a time; the two verifiers alternate repetition by repetition; medians and
minimums are printed as a markdown table. The other verifier is main's by default
(`git show main:templates/verifiers/code.py`), or --other PATH.

    python benchmarks/code_verifier.py --reps 5
"""

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPLETION = "Here it is.\n\n```python\ndef add(a, b):\n    return a + b\n```\n"
METADATA = {
    "tests": [
        "assert add(1, 2) == 3",
        "assert add(-1, 1) == 0",
        "assert add(2, 2) == 4",
        "assert add(0, 0) == 0",
    ],
    "entry_point": "add",
    "timeout_s": 30,
}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.verify


def step(verify, completions: int, workers: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        scores = list(pool.map(lambda _: verify(COMPLETION, METADATA), range(completions)))
    elapsed = time.perf_counter() - start
    assert all(score["reward"] == 1.0 for score in scores), scores[0]
    return elapsed


def single(verify) -> float:
    start = time.perf_counter()
    assert verify(COMPLETION, METADATA)["reward"] == 1.0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, help="the verifier to compare with (default: main's)")
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        other = args.other
        if other is None:
            other = Path(tmp) / "main_code.py"
            source = subprocess.run(
                ["git", "show", "main:templates/verifiers/code.py"], cwd=ROOT, capture_output=True, check=True
            )
            other.write_bytes(source.stdout)
        verifiers = {
            "sandboxed (this tree)": load(ROOT / "templates" / "verifiers" / "code.py", "bench_code_new"),
            f"other ({args.other or 'main'})": load(other, "bench_code_other"),
        }
        for verify in verifiers.values():  # warm-up: the sandbox's one-time probe, page cache
            step(verify, args.workers, args.workers)
        steps = {name: [] for name in verifiers}
        singles = {name: [] for name in verifiers}
        for rep in range(args.reps):
            order = list(verifiers) if rep % 2 == 0 else list(reversed(verifiers))
            for name in order:
                steps[name].append(step(verifiers[name], args.completions, args.workers))
                singles[name].append(min(single(verifiers[name]) for _ in range(3)))
    print(f"{args.completions} completions, {args.workers} threads, {args.reps} repetitions (median, min)\n")
    print("| verifier | one step of completions | per completion | one call alone |")
    print("|---|---|---|---|")
    for name in verifiers:
        median, fastest = statistics.median(steps[name]), min(steps[name])
        alone = statistics.median(singles[name])
        print(
            f"| {name} | {median:.2f} s (min {fastest:.2f} s) | {1000 * median / args.completions:.0f} ms "
            f"| {1000 * alone:.0f} ms |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
