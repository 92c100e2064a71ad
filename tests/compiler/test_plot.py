"""`rtc plot` groups namespaced metrics: train/X and eval/X share a panel, other namespaces get rows."""

from __future__ import annotations

import json

import pytest

from rtc.plot import panel_rows, plot_metrics, series


def test_train_and_eval_share_a_panel_and_namespaces_get_rows(tmp_path):
    records = [
        {
            "step": 0,
            "split": "train",
            "train/loss": 2.0,
            "train/n_datums": 8,
            "optim/grad_norm": 1.5,
            "optim/lr": 1e-4,
            "time/step": 3.0,
        },
        {"step": 0, "split": "eval", "eval/loss": 2.1, "eval/accuracy": 0.25, "eval/n_samples": 16},
        {"step": 1, "split": "train", "train/loss": None, "train/reward": 0.5, "time/step": 2.5},
    ]
    assert panel_rows(records) == [
        ["loss", "reward", "accuracy"],
        ["optim/grad_norm", "optim/lr"],
        ["time/step"],
    ]
    assert series(records[1]) == [("loss", "eval", 2.1), ("accuracy", "eval", 0.25)]
    metrics = tmp_path / "m.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert plot_metrics(metrics, tmp_path / "c.png") == [
        "loss",
        "reward",
        "accuracy",
        "optim/grad_norm",
        "optim/lr",
        "time/step",
    ]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_bookkeeping_is_not_plotted_and_nothing_numeric_is_an_error(tmp_path):
    from rtc.errors import UsageError

    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"step": 0, "split": "train", "train/n_datums": 4, "train/cut_to_length": 0}\n')
    with pytest.raises(UsageError, match="no numeric metrics"):
        plot_metrics(metrics, tmp_path / "c.png")
