"""`rtc plot`: one PNG with a panel per metric of a loop's metrics.jsonl, train and eval apart."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import UsageError

# Panels in this order when present; any other numeric metric follows.
PREFERRED = [
    "loss",
    "reward",
    "accuracy",
    "margin",
    "chosen_reward",
    "rejected_reward",
    "fallback_frac",
    "skipped_frac",
]
# Bookkeeping, not curves.
SKIPPED = {"step", "n_datums", "n_tokens", "sampled_tokens", "truncated", "lr", "time_s"}


def read_metrics(path: str | Path) -> list[dict]:
    records = []
    for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{line_no}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "step" not in record:
            raise UsageError(f"{path}:{line_no}: expected an object with a 'step'")
        records.append(record)
    if not records:
        raise UsageError(f"{path}: no metrics yet")
    return records


def panels_for(records: list[dict]) -> list[str]:
    numeric = {
        key
        for record in records
        for key, value in record.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and key not in SKIPPED
    }
    return [k for k in PREFERRED if k in numeric] + sorted(numeric - set(PREFERRED))


def plot_metrics(path: str | Path, output: str | Path) -> list[str]:
    """Draw the curves; returns the panel names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(path)
    panels = panels_for(records)
    if not panels:
        raise UsageError(f"{path}: no numeric metrics to plot")
    cols = min(len(panels), 3)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, panels, strict=False):
        for split, style in (
            ("train", {"marker": ".", "linestyle": "-"}),
            ("eval", {"marker": "o", "linestyle": "--"}),
        ):
            points = [
                (r["step"], r[key])
                for r in records
                if r.get("split", "train") == split and isinstance(r.get(key), int | float)
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=split, **style)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(Path(path).parent.name or str(path))
    fig.tight_layout()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return panels
