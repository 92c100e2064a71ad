"""`rtc explain`: the fully resolved card, one field a line, with where each value came from."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .resolve import ResolvedCard, data_path


def format_line(card: ResolvedCard) -> str:
    """The chat format: the renderer and how it renders (`rtc explain`'s format line)."""
    renderer = card.renderer
    how = {
        "tml": f"tml-renderers {renderer.modes[card.thinking].constructor}",
        "template": "the model's Hugging Face chat template",
        "base": "plain User:/Assistant: text",
    }[renderer.kind]
    return f"{renderer.name} ({how})"


def explain_lines(card: ResolvedCard) -> list[str]:
    o = card.origins
    rows: list[tuple[str, object, str]] = [
        ("name", card.name, o["name"]),
        ("title", card.title, o["title"]),
        ("signal", card.signal.name, o["signal"]),
        ("method", card.method.name, o["method"]),
        ("task", card.task.name, o["task"]),
        ("model", f"{card.model.name} ({card.model.size})", o["model"]),
        ("format", format_line(card), f"catalog: {card.model.name}"),
        ("thinking", card.thinking, o["thinking"]),
        ("trained", card.renderer.modes[card.thinking].trained, "renderers.yaml"),
        ("loss", card.loss.name, o["loss"]),
    ]
    rows += [(f"loss_config.{k}", v, o[f"loss_config.{k}"]) for k, v in card.loss_config.items()]
    rows += [
        ("rank", card.rank, o["rank"]),
        ("steps", card.steps, o["steps"]),
        ("lr", card.lr, o["lr"]),
        ("sampling.max_tokens", card.sampling.max_tokens, o["sampling.max_tokens"]),
        ("sampling.temperature", card.sampling.temperature, o["sampling.temperature"]),
        ("sampling.top_p", card.sampling.top_p, o["sampling.top_p"]),
    ]
    rows += [(name, value, o[name]) for name, value in card.settings.items()]
    rows += [
        ("eval_every", card.eval_every, o["eval_every"]),
        ("save_every", card.save_every, o["save_every"]),
        ("seed", card.seed, o["seed"]),
        ("max_length", card.max_length, o["max_length"]),
        ("overlong", card.overlong, o["overlong"]),
        ("init_from", card.init_from or "- (fresh LoRA weights)", o["init_from"]),
        ("system_prompt", card.system_prompt, o["system_prompt"]),
        ("end_of_turn", list(card.model.end_of_turn) or "(from the tokenizer)", "catalog"),
        ("data.train", card.data_train or "-", o["data.train"]),
        ("data.eval", card.data_eval or "-", o["data.eval"]),
    ]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"# {card.source} (sha256 {card.card_sha256[:12]})"]
    for name, value, origin in rows:
        shown = repr(value) if isinstance(value, str) else str(value)
        lines.append(f"{name.ljust(width)}  {shown}  <- {origin}")
    return lines


# Run in a fresh interpreter: the compiled loop's own --dry-run estimate (cost_lines) for the card's
# data, printed as one JSON line; everything else the loop prints goes to stderr.
ESTIMATE = """
import contextlib, importlib.util, json, sys
path, *data = sys.argv[1:]
with contextlib.redirect_stdout(sys.stderr):
    spec = importlib.util.spec_from_file_location("rtc_estimate", path)
    loop = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    args = loop.parse_args(["--dry-run", "--data", data[0], *(["--eval-data", data[1]] if data[1:] else [])])
    rows = loop.load_dataset(args.data)
    eval_rows = loop.load_dataset(args.eval_data) if args.eval_data else loop.Rows([], [])
    lines = loop.cost_lines(args, rows, eval_rows, loop.local_format(args))
print(json.dumps(lines))
"""


def estimate_lines(card: ResolvedCard) -> list[str]:
    """The cost estimate that `python LOOP --dry-run` prints for the card's own data (data.train,
    data.eval): the compiled loop computes it in a subprocess, so that the tokenizers (tml-renderers
    imports torch) are never imported into rtc itself. Never raises: a failure is a line saying why."""
    if card.data_train is None:
        return ["cost: the card names no data (data.train); `python LOOP --dry-run --data FILE` estimates it"]
    from .render import render  # jinja2: only where a loop is rendered

    data = [str(Path(data_path(card, rel)).resolve()) for rel in (card.data_train, card.data_eval) if rel]
    with tempfile.TemporaryDirectory(prefix="rtc-explain-") as tmp:
        loop = Path(tmp) / f"{card.name}.py"
        loop.write_text(render(card, loop.name), encoding="utf-8")
        try:
            result = subprocess.run(
                [sys.executable, "-c", ESTIMATE, str(loop), *data],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            return ["cost: not estimated: counting the tokens took over 10 minutes"]
    if result.returncode != 0:
        why = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return [f"cost: not estimated: {why}"]
    return json.loads(result.stdout.splitlines()[-1])
