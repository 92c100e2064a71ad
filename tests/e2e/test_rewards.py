"""Rewards from a model, end to end on the tiny model through rtc serve: a reward model learns a
synthetic preference (the chosen response ends by offering more help with a question, the rejected
one with a closing statement of about the same length) to high held-out pairwise accuracy; the
RLHF chain SFT -> reward model -> GRPO runs through checkpoints.jsonl files, and GRPO raises the
fixed reward model's reward; a judge whose every verdict is malformed is counted, never a crash."""

from __future__ import annotations

import pytest
from e2e_kit import DATA, read_jsonl, train_records

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chain(server, tmp_path_factory):
    """Stages 1 and 2 of the RLHF cards on the tiny model: their run directories."""
    import subprocess
    import sys

    from e2e_kit import GENERATED, loop_env

    work = tmp_path_factory.mktemp("rlhf")

    def run(name: str, *args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(GENERATED / f"{name}.py"), *args]
        result = subprocess.run(
            command, cwd=work, env=loop_env(server), capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result

    sft = run(
        "rlhf-1-sft-qwen3",
        *("--data", str(DATA / "rlhf-sft.jsonl"), "--steps", "3", "--batch-size", "4"),
        *("--eval-every", "0", "--save-every", "0", "--max-tokens", "4", "--lr", "1e-2"),
    )
    rm = run(
        "rlhf-2-reward-model-qwen3",
        *("--data", str(DATA / "rlhf-prefs.jsonl"), "--eval-data", str(DATA / "rlhf-prefs.eval.jsonl")),
        *("--steps", "12", "--batch-size", "8", "--lr", "1e-2", "--eval-every", "12"),
        *("--save-every", "0", "--max-tokens", "4"),
    )
    return {"dir": work / "runs", "sft": sft, "rm": rm, "run": run, "work": work}


def test_reward_model_reaches_high_held_out_pairwise_accuracy(chain):
    records = read_jsonl(chain["dir"] / "rlhf-2-reward-model-qwen3" / "metrics.jsonl")
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [0, 12]
    # Held-out questions, and closings no training pair has: the property, not memory.
    assert evals[-1]["eval/accuracy"] >= 0.9, evals
    assert evals[-1]["eval/accuracy"] > evals[0]["eval/accuracy"], evals
    assert evals[-1]["eval/margin"] > 0 and evals[-1]["eval/loss"] < evals[0]["eval/loss"]
    checkpoints = read_jsonl(chain["dir"] / "rlhf-2-reward-model-qwen3" / "checkpoints.jsonl")
    assert "/sampler_weights/" in checkpoints[-1]["sampler_path"]  # what stage 3 scores with


def test_grpo_against_the_reward_model_raises_its_reward(chain):
    runs = chain["dir"]
    result = chain["run"](
        "rlhf-3-grpo-qwen3",
        *("--data", str(DATA / "rlhf-prompts.jsonl"), "--eval-data", str(DATA / "rlhf-prompts.eval.jsonl")),
        *("--init-from", str(runs / "rlhf-1-sft-qwen3" / "checkpoints.jsonl")),
        *("--reward-model", str(runs / "rlhf-2-reward-model-qwen3" / "checkpoints.jsonl")),
        *("--steps", "16", "--group-size", "4", "--prompts-per-step", "4", "--max-tokens", "8"),
        *("--grade-truncated", "--lr", "2e-2", "--eval-every", "0", "--save-every", "0"),
    )
    sft_path = read_jsonl(runs / "rlhf-1-sft-qwen3" / "checkpoints.jsonl")[-1]["path"]
    rm_path = read_jsonl(runs / "rlhf-2-reward-model-qwen3" / "checkpoints.jsonl")[-1]["sampler_path"]
    assert f"starting from {sft_path}" in result.stdout
    assert f"rewards from {rm_path}" in result.stdout
    train = train_records(runs / "rlhf-3-grpo-qwen3" / "metrics.jsonl")
    assert len(train) == 16
    for record in train:
        assert {"train/reward", "train/rm_score", "train/length", "train/reward_length_corr"} <= set(record)
    rewards = [r["train/reward"] for r in train]
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.05, rewards


def test_a_judge_whose_verdicts_are_all_malformed_scores_zero_and_the_run_finishes(run_loop, tmp_path):
    result = run_loop(
        "grpo-rubric-qwen3",
        *("--data", DATA / "rubric-chat.jsonl", "--eval-data", DATA / "rubric-chat.eval.jsonl"),
        *("--steps", "2", "--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "4"),
        *("--grade-truncated", "--judge-max-tokens", "4", "--eval-every", "2", "--save-every", "0"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "note: a malformed judge verdict scores 0 (counted as judge_malformed)" in result.stdout
    records = read_jsonl(tmp_path / "runs" / "grpo-rubric-qwen3" / "metrics.jsonl")
    for record in records:
        split = record["split"]
        assert record[f"{split}/judge_malformed"] == 1.0 and record[f"{split}/judge_retried"] == 1.0
        assert record[f"{split}/reward"] == 0.0
    assert [r["train/skipped_frac"] for r in records if r["split"] == "train"] == [1.0, 1.0]
