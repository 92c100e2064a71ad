"""`rtc explain`: the fully resolved card, one field a line, with where each value came from."""

from __future__ import annotations

from .resolve import ResolvedCard


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
