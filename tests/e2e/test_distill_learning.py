"""On-policy distillation learns: towards a fixed teacher checkpoint on the tiny model, the reverse KL
the loop measures on held-out prompts falls by a clear margin (numbers from the loop's own log)."""

from __future__ import annotations

from e2e_kit import DATA, read_jsonl, write_jsonl


def test_distill_towards_a_teacher_checkpoint_lowers_held_out_reverse_kl(run_loop, tmp_path):
    # The teacher: the tiny model nudged (a few SFT steps) towards answering every capital question with
    # "Paris", held-out prompts included. Nudged, not drilled: a teacher that puts all its mass on one
    # token the student never samples leaves on-policy distillation nothing to learn from (tried: a
    # reverse KL of 15 nats per token that did not move), the known limit of reverse-KL distillation.
    rows = read_jsonl(DATA / "match-capitals.jsonl")
    held_out = read_jsonl(DATA / "match-capitals.eval.jsonl")[:4]
    teacher_data = write_jsonl(
        tmp_path / "teacher.jsonl",
        [{"prompt": row["prompt"], "completion": "Paris"} for row in rows + held_out],
    )
    result = run_loop(
        "sft-chat-qwen3",
        *("--data", teacher_data, "--steps", "6", "--batch-size", "8", "--lr", "3e-3"),
        *("--eval-every", "0", "--save-every", "0", "--max-tokens", "8", "--out", "teacher"),
    )
    assert result.returncode == 0, result.stdout + result.stderr

    # The student: the base tiny model, distilled on the training prompts only; evaluated on the
    # held-out ones before the first step, halfway and after the last.
    result = run_loop(
        "distill-math-qwen3",
        *(
            "--data",
            DATA / "match-capitals.jsonl",
            "--eval-data",
            write_jsonl(tmp_path / "eval.jsonl", held_out),
        ),
        *("--teacher", tmp_path / "runs" / "teacher" / "checkpoints.jsonl", "--steps", "12", "--lr", "1e-2"),
        *("--group-size", "4", "--prompts-per-step", "4", "--max-tokens", "8"),
        *("--eval-every", "6", "--save-every", "0", "--out", "student"),
        timeout=420,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "teacher: tinker://" in result.stdout  # the checkpoint, saved for sampling, not a base model
    records = read_jsonl(tmp_path / "runs" / "student" / "metrics.jsonl")
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 6, 12]
    first, last = evals[0]["eval/reverse_kl"], evals[-1]["eval/reverse_kl"]
    assert first > 0.2, evals  # the teacher differs from the base model: the measure has room to fall
    assert last < 0.5 * first, [(r["step"], r["eval/reverse_kl"]) for r in evals]
