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


def test_a_tool_loop_plots_its_agent_metrics(tmp_path):
    """The metrics a tool loop writes (episode_metrics of the compiled grpo-tools-llama3 loop, run on
    episodes made here) each get a panel: turns, tool calls per tool, malformed rate, answer rate,
    truncated episodes, train and eval on one panel."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "generated" / "grpo-tools-llama3.py"
    spec = importlib.util.spec_from_file_location("plot_tool_loop", path)
    loop = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loop
    try:
        spec.loader.exec_module(loop)
    finally:
        del sys.modules[spec.name]
    calls = dict.fromkeys(loop.TOOL_SIGNATURES, 0)
    answered = loop.Episode(
        [], [None, None], {**calls, "search": 1}, end="answer", verdict={"reward": 1.0, "correct": 1.0}
    )
    cut = loop.Episode(
        [], [None], calls, malformed=1, end="truncated", verdict={"reward": 0.0, "correct": 0.0}
    )
    records = [
        {"step": 0, "split": split, **loop.episode_metrics([answered, cut], split)}
        for split in ("train", "eval")
    ]
    assert records[0]["train/malformed_rate"] == 0.5 and records[0]["train/answered"] == 0.5
    metrics = tmp_path / "m.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    panels = plot_metrics(metrics, tmp_path / "c.png")
    tools = [f"calls_{name}" for name in ("search", "lookup", "calculator", "python")]
    agent = ["turns", "tool_calls", "tool_call_rate", *tools, "malformed_rate", "answered", "truncated"]
    assert set(agent) <= set(panels), panels
    assert {line for record in records for panel, line, _ in series(record) if panel == "turns"} == {
        "train",
        "eval",
    }
