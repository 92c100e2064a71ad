"""`rtc plot`: one PNG with a panel per metric of a loop's metrics.jsonl, a row per namespace."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import UsageError

# Metric keys are namespaced: `train/loss` and `eval/loss` share the panel `loss` (a line each);
# `optim/...`, `time/...` and any other namespace get a row of panels of their own. Within a row,
# these panels come first when present; the rest follow in name order.
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
# Bookkeeping, not curves (the name after the namespace).
SKIPPED = {"n_datums", "n_tokens", "n_samples", "sampled_tokens", "cut_to_length"}
# The optimizer's own echo of its step count and rate (optim/lr is the loop's).
SKIPPED_KEYS = {"optim/step", "optim/learning_rate"}
SPLITS = ("train", "eval")


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


def series(record: dict) -> list[tuple[str, str, float]]:
    """(panel, line, value) for each numeric metric of a record: `train/loss` -> ("loss", "train");
    `optim/grad_norm` -> ("optim/grad_norm", split); an old flat `loss` -> ("loss", split)."""
    split = record.get("split", "train")
    out = []
    for key, value in record.items():
        if key == "step" or not isinstance(value, int | float) or isinstance(value, bool):
            continue
        namespace, _, name = key.rpartition("/")
        if name in SKIPPED or key in SKIPPED_KEYS:
            continue
        if namespace in SPLITS:
            out.append((name, namespace, value))
        else:
            out.append((key, split, value))
    return out


def panel_rows(records: list[dict]) -> list[list[str]]:
    """Panels grouped by namespace: the train/eval metrics first, then one row per namespace."""
    names = {panel for record in records for panel, _, _ in series(record)}
    groups: dict[str, list[str]] = {}
    for panel in names:
        groups.setdefault(panel.rpartition("/")[0], []).append(panel)

    def order(panel: str) -> tuple:
        tail = panel.rpartition("/")[2]
        return (PREFERRED.index(tail) if tail in PREFERRED else len(PREFERRED), panel)

    return [sorted(groups[namespace], key=order) for namespace in sorted(groups)]


def panels_for(records: list[dict]) -> list[str]:
    return [panel for row in panel_rows(records) for panel in row]


def plot_metrics(path: str | Path, output: str | Path) -> list[str]:
    """Draw the curves; returns the panel names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(path)
    rows = panel_rows(records)
    if not rows:
        raise UsageError(f"{path}: no numeric metrics to plot")
    cols = min(max(len(row) for row in rows), 4)
    layout = [row[i : i + cols] for row in rows for i in range(0, len(row), cols)]
    fig, axes = plt.subplots(len(layout), cols, figsize=(4.2 * cols, 3.2 * len(layout)), squeeze=False)
    styles = {"train": {"marker": ".", "linestyle": "-"}, "eval": {"marker": "o", "linestyle": "--"}}
    for axes_row, panels in zip(axes, layout, strict=True):
        for ax, panel in zip(axes_row, panels, strict=False):
            lines: dict[str, list[tuple[int, float]]] = {}
            for record in records:
                for name, line, value in series(record):
                    if name == panel:
                        lines.setdefault(line, []).append((record["step"], value))
            for line, points in sorted(lines.items()):
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=line, **styles.get(line, {}))
            ax.set_title(panel)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
        for ax in axes_row[len(panels) :]:
            ax.axis("off")
    panels = [panel for panels in layout for panel in panels]
    fig.suptitle(Path(path).parent.name or str(path))
    fig.tight_layout()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return panels
