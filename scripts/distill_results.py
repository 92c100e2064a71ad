"""Reproduce docs/results.md, "Distillation (issue 13)": SmolLM2-135M-Instruct on this CPU through one
`rtc serve --model smollm2` (torch threads 1).

1. The teacher: SmolLM2 trained (sft-chat-qwen3 loop, SFT) to answer "What is the capital of X?" with
   the capital's name alone, on 40 countries.
2. The student: base SmolLM2, distilled on-policy towards that checkpoint (a distill card for the match
   task, compiled here) on the same 40 prompts; 10 other countries are held out. Before the first step,
   halfway and after the last: the held-out per-token reverse KL to the teacher and the match accuracy.
3. The teacher's own held-out accuracy (and the KL of the teacher to itself, about 0) from a distill
   run whose student starts at the teacher's weights (--init-from), evaluated before its one step.

Outputs under out/results-distill/ (metrics, stdout); prints the numbers docs/results.md quotes.
Run from the repository root: python scripts/distill_results.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rtc.runner import start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "results-distill"
MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # any name: the smollm2 server serves it with SmolLM2's template
QUESTION = "What is the capital of {}? Answer with just the name, nothing else."
CAPITALS = [
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Germany", "Berlin"),
    ("Russia", "Moscow"),
    ("China", "Beijing"),
    ("Egypt", "Cairo"),
    ("Greece", "Athens"),
    ("Portugal", "Lisbon"),
    ("Ireland", "Dublin"),
    ("Austria", "Vienna"),
    ("Poland", "Warsaw"),
    ("Norway", "Oslo"),
    ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"),
    ("Hungary", "Budapest"),
    ("Belgium", "Brussels"),
    ("the Netherlands", "Amsterdam"),
    ("Thailand", "Bangkok"),
    ("South Korea", "Seoul"),
    ("India", "New Delhi"),
    ("Mexico", "Mexico City"),
    ("Argentina", "Buenos Aires"),
    ("Peru", "Lima"),
    ("Chile", "Santiago"),
    ("Colombia", "Bogota"),
    ("Kenya", "Nairobi"),
    ("Canada", "Ottawa"),
    ("Australia", "Canberra"),
    ("Brazil", "Brasilia"),
    ("Turkey", "Ankara"),
    ("Iran", "Tehran"),
    ("Iraq", "Baghdad"),
    ("Cuba", "Havana"),
    ("the Philippines", "Manila"),
    ("Indonesia", "Jakarta"),
    ("Vietnam", "Hanoi"),
    ("Ukraine", "Kyiv"),
    # held out from here on
    ("the United Kingdom", "London"),
    ("the Czech Republic", "Prague"),
    ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"),
    ("Serbia", "Belgrade"),
    ("Croatia", "Zagreb"),
    ("Iceland", "Reykjavik"),
    ("Switzerland", "Bern"),
    ("Scotland", "Edinburgh"),
    ("Morocco", "Rabat"),
    ("Ethiopia", "Addis Ababa"),
    ("Nigeria", "Abuja"),
    ("Pakistan", "Islamabad"),
    ("Afghanistan", "Kabul"),
    ("Nepal", "Kathmandu"),
    ("Venezuela", "Caracas"),
    ("Uruguay", "Montevideo"),
    ("Saudi Arabia", "Riyadh"),
    ("Syria", "Damascus"),
    ("Lebanon", "Beirut"),
]
TRAIN, HELD_OUT = CAPITALS[:40], CAPITALS[40:50]  # the last 10 unused: eval is the slow part
DISTILL_CARD = """\
name: distill-capitals-smollm2
title: Distil an SFT'd SmolLM2 (terse capitals) into base SmolLM2
signal: teacher
method: distill
task: match
model: {MODEL}
teacher: {teacher}
loss: importance_sampling
rank: 32
steps: 12
lr: 1e-3
sampling:
  max_tokens: 16
  temperature: 1.0
group_size: 2
prompts_per_step: 4
eval_every: 6
save_every: 0
"""


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run(command: list, env: dict, log: Path) -> None:
    """One command at a time, its output to the terminal and to `log`."""
    print("$", " ".join(map(str, command)), flush=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            list(map(str, command)),
            cwd=OUT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in process.stdout:
            sys.stdout.write(line)
            out.write(line)
        if process.wait() != 0:
            raise SystemExit(f"failed ({process.returncode}): {command}")
    print(f"   ({time.monotonic() - started:.0f} s)", flush=True)


def evals(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in records if r["split"] == "eval"]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("runs", "state"):
        subprocess.run(["rm", "-rf", str(OUT / name)], check=True)
    teacher_rows = [{"prompt": QUESTION.format(c), "completion": a} for c, a in TRAIN]
    write_jsonl(OUT / "teacher-sft.jsonl", teacher_rows)
    write_jsonl(
        OUT / "prompts.jsonl", [{"prompt": QUESTION.format(c), "metadata": {"answer": a}} for c, a in TRAIN]
    )
    write_jsonl(
        OUT / "held-out.jsonl",
        [{"prompt": QUESTION.format(c), "metadata": {"answer": a}} for c, a in HELD_OUT],
    )
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    process, url = start_server(
        "smollm2", state_dir=OUT / "state", log_path=OUT / "serve.log", api_key="tml-local"
    )
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TINKER_")}
        env.update(TINKER_BASE_URL=url, TINKER_API_KEY="tml-local", PYTHONUNBUFFERED="1")
        started = time.monotonic()
        sft = ROOT / "generated" / "sft-chat-qwen3.py"
        run(
            [sys.executable, sft, "--data", "teacher-sft.jsonl", "--steps", "12", "--batch-size", "8"]
            + [
                "--lr",
                "1e-3",
                "--eval-every",
                "0",
                "--save-every",
                "0",
                "--max-tokens",
                "32",
                "--out",
                "teacher",
            ],
            env,
            OUT / "teacher.txt",
        )
        # The card names the teacher's checkpoint (the last line of the teacher run's checkpoints.jsonl).
        teacher = OUT / "runs" / "teacher" / "checkpoints.jsonl"
        path = json.loads(teacher.read_text(encoding="utf-8").splitlines()[-1])["path"]
        card, loop = OUT / "distill-capitals-smollm2.yaml", OUT / "distill-capitals-smollm2.py"
        card.write_text(DISTILL_CARD.format(MODEL=MODEL, teacher=path), encoding="utf-8")
        subprocess.run(["rtc", "compile", card, "-o", loop], check=True)
        common = ["--data", "prompts.jsonl", "--eval-data", "held-out.jsonl"]
        run([sys.executable, loop, *common, "--out", "student"], env, OUT / "student.txt")
        # The teacher against itself: held-out accuracy of the teacher, and a KL that should be ~0.
        run(
            [sys.executable, loop, *common, "--init-from", teacher, "--steps", "1"]
            + ["--eval-every", "1", "--out", "teacher-self"],
            env,
            OUT / "teacher-self.txt",
        )
        print(f"total wall time {time.monotonic() - started:.0f} s")
    finally:
        stop_server(process)
    student = evals(OUT / "runs" / "student" / "metrics.jsonl")
    print("held-out (10 prompts x 4 samples at temperature 1):")
    print("  student step | reverse KL | accuracy | truncated")
    for r in student:
        kl, accuracy, cut = r["eval/reverse_kl"], r["eval/accuracy"], r["eval/truncated"]
        print(f"  {r['step']:12d} | {kl:10.3f} | {accuracy:8.3f} | {cut:.3f}")
    itself = evals(OUT / "runs" / "teacher-self" / "metrics.jsonl")[0]
    kl, accuracy = itself["eval/reverse_kl"], itself["eval/accuracy"]
    print(f"  teacher itself: reverse KL {kl:.3f}, accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
