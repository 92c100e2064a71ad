"""--resume continues at the step after the checkpoint, with the same data order and Adam state, so
the resumed steps reproduce the uninterrupted run and no step is logged twice."""

from __future__ import annotations

import pytest
from e2e_kit import DATA, read_jsonl, train_records


def test_sft_resume_reproduces_the_uninterrupted_run(run_loop, tmp_path):
    args = [
        "--data",
        DATA / "sft-chat.jsonl",
        "--steps",
        "5",
        "--batch-size",
        "4",
        "--lr",
        "1e-2",
        "--eval-every",
        "0",
        "--save-every",
        "2",
        "--max-tokens",
        "4",
    ]
    full = run_loop("sft-chat-qwen3", *args)
    assert full.returncode == 0, full.stderr
    run_dir = tmp_path / "runs" / "sft-chat-qwen3"
    uninterrupted = {r["step"]: r["train/loss"] for r in train_records(run_dir / "metrics.jsonl")}
    checkpoints = read_jsonl(run_dir / "checkpoints.jsonl")
    assert [c["step"] for c in checkpoints] == [1, 3, 4]

    # As if the run had died after its checkpoint at step 1: resume from it.
    resumed = run_loop("sft-chat-qwen3", *args, "--resume", checkpoints[0]["path"])
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {checkpoints[0]['path']}: continuing at step 2" in resumed.stdout
    records = train_records(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]  # none repeated, none lost
    for record in records:
        assert record["train/loss"] == pytest.approx(uninterrupted[record["step"]], rel=1e-4, abs=1e-5)


def test_resume_latest_after_the_last_step_does_nothing_more(run_loop, tmp_path):
    args = [
        "--data",
        DATA / "sft-chat.jsonl",
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--max-tokens",
        "4",
    ]
    assert run_loop("sft-chat-qwen3", *args).returncode == 0
    again = run_loop("sft-chat-qwen3", *args, "--resume")
    assert again.returncode == 0, again.stderr
    assert "continuing at step 2" in again.stdout
    steps = [r["step"] for r in train_records(tmp_path / "runs" / "sft-chat-qwen3" / "metrics.jsonl")]
    assert steps == [0, 1]


def test_dpo_resume_keeps_the_original_reference(run_loop, tmp_path):
    args = [
        "--data",
        DATA / "dpo-chat.jsonl",
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--lr",
        "1e-2",
        "--eval-every",
        "0",
        "--save-every",
        "2",
        "--max-tokens",
        "4",
    ]
    first = run_loop("dpo-chat-llama3", *args)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "runs" / "dpo-chat-llama3"
    uninterrupted = {r["step"]: r for r in train_records(run_dir / "metrics.jsonl")}
    checkpoints = read_jsonl(run_dir / "checkpoints.jsonl")
    reference = checkpoints[0]["reference"]
    assert all(c["reference"] == reference for c in checkpoints)

    resumed = run_loop("dpo-chat-llama3", *args, "--resume", checkpoints[0]["path"])
    assert resumed.returncode == 0, resumed.stderr
    assert "reference policy:" not in resumed.stdout  # no new reference was saved
    later = read_jsonl(run_dir / "checkpoints.jsonl")[len(checkpoints) :]
    assert later and all(c["reference"] == reference for c in later)
    # Against the same reference, the resumed steps reproduce the uninterrupted ones.
    for record in train_records(run_dir / "metrics.jsonl"):
        assert record["train/loss"] == pytest.approx(
            uninterrupted[record["step"]]["train/loss"], rel=1e-4, abs=1e-5
        )
        assert record["train/margin"] == pytest.approx(
            uninterrupted[record["step"]]["train/margin"], rel=1e-3, abs=1e-5
        )


def test_init_from_starts_a_new_run_from_another_runs_weights(run_loop, tmp_path):
    """Runs chain: the second run's first eval (before any step) scores exactly the first run's final
    weights, and its checkpoints and log are its own."""
    common = ["--eval-data", DATA / "sft-chat.eval.jsonl", "--batch-size", "4", "--max-tokens", "4"]
    first = run_loop(
        "sft-chat-qwen3",
        "--data",
        DATA / "sft-chat.jsonl",
        "--steps",
        "3",
        "--lr",
        "1e-2",
        "--eval-every",
        "3",
        "--out",
        "first",
        *common,
    )
    assert first.returncode == 0, first.stderr
    first_dir = tmp_path / "runs" / "first"
    final = [r for r in read_jsonl(first_dir / "metrics.jsonl") if r["split"] == "eval"][-1]
    assert final["step"] == 3

    second = run_loop(
        "sft-chat-qwen3",
        "--data",
        DATA / "sft-chat.jsonl",
        "--steps",
        "1",
        "--eval-every",
        "1",
        "--out",
        "second",
        "--init-from",
        first_dir / "checkpoints.jsonl",
        *common,
    )
    assert second.returncode == 0, second.stderr
    latest = read_jsonl(first_dir / "checkpoints.jsonl")[-1]["path"]
    assert f"starting from {latest} (its weights; a fresh optimizer)" in second.stdout
    start = [r for r in read_jsonl(tmp_path / "runs" / "second" / "metrics.jsonl") if r["split"] == "eval"][0]
    assert start["step"] == 0
    assert start["eval/loss"] == pytest.approx(final["eval/loss"], rel=1e-4, abs=1e-5)
    assert [c["step"] for c in read_jsonl(tmp_path / "runs" / "second" / "checkpoints.jsonl")] == [0]


def test_init_from_a_missing_checkpoint_list_is_refused_before_connecting(run_loop, tmp_path):
    result = run_loop(
        "sft-chat-qwen3", "--data", DATA / "sft-chat.jsonl", "--init-from", tmp_path / "nope.jsonl"
    )
    assert result.returncode == 1
    assert f"error: --init-from: cannot read {tmp_path / 'nope.jsonl'}" in result.stderr
    assert "Traceback" not in result.stderr
