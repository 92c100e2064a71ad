"""Every card in recipes/ runs its generated loop for a few steps on its example data through the
real SDK and rtc serve, exits 0, and leaves the metrics and checkpoints a user expects."""

from __future__ import annotations

import pytest
import yaml
from e2e_kit import DATA, ROOT, read_jsonl

CARDS = sorted((ROOT / "recipes").glob("*.yaml"))

# Small sizes so every loop runs in seconds on the tiny model; the loop's code paths are all used.
SIZES = {
    "grpo": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8"],
    "sdft": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8"],
    "sft": ["--batch-size", "4", "--max-tokens", "8"],
    "dpo": ["--batch-size", "2", "--max-tokens", "8"],
}
KEYS = {
    "grpo": {"train/reward", "train/accuracy", "train/skipped_frac", "train/sampled_tokens"},
    "sdft": {"train/fallback_frac", "train/fallbacks"},
    "sft": {"train/n_tokens"},
    "dpo": {"train/accuracy", "train/margin", "train/chosen_reward", "train/rejected_reward"},
}
# Every train record: the step, the loss, the learning rate, the step's time; and the optimizer's
# own metrics when there was an update (GRPO skips it when every group had equal rewards).
COMMON = {"step", "split", "train/loss", "train/n_datums", "optim/lr", "time/step"}


@pytest.mark.parametrize("card", CARDS, ids=[c.stem for c in CARDS])
def test_card_trains_through_the_sdk(run_loop, tmp_path, card):
    spec = yaml.safe_load(card.read_text())
    result = run_loop(
        spec["name"],
        "--data",
        DATA / spec["data"]["train"].split("/")[-1],
        "--eval-data",
        DATA / spec["data"]["eval"].split("/")[-1],
        "--steps",
        "3",
        "--eval-every",
        "2",
        "--save-every",
        "2",
        *SIZES[spec["method"]],
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    run_dir = tmp_path / "runs" / spec["name"]
    records = read_jsonl(run_dir / "metrics.jsonl")
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train] == [0, 1, 2]
    assert [r["step"] for r in evals] == [0, 2, 3]  # before steps 0 and 2, and after the last
    for record in train:
        assert COMMON | KEYS[spec["method"]] <= set(record), sorted(record)
        assert ("optim/grad_norm" in record) == (record["train/loss"] is not None), sorted(record)
    for record in evals:
        assert all(key == "step" or key == "split" or key.startswith("eval/") for key in record), record
    checkpoints = read_jsonl(run_dir / "checkpoints.jsonl")
    assert [c["step"] for c in checkpoints] == [1, 2]
    assert all(c["path"].startswith("tinker://") for c in checkpoints)
    assert "sample from the trained weights:" in result.stdout
