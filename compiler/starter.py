"""`rtc new`: a commented starter card for a signal, method, task and model."""

from __future__ import annotations

import json
import re

from .catalog import default_lr, load_catalog, same_tokenizer
from .errors import UsageError
from .schema import SCHEMA_FILE
from .validate import did_you_mean, fit_problems


def _check(kind: str, value: str, choices) -> None:
    if value not in choices:
        raise UsageError(
            f"--{kind}: unknown {kind} {value!r}{did_you_mean(value, list(choices))}; see `rtc list {kind}s`"
        )


def _yaml_str(text: str) -> str:
    # A JSON string literal is a valid double-quoted YAML scalar for any text.
    return json.dumps(text, ensure_ascii=False)


def starter_card(*, signal: str, method: str, task: str, model: str, name: str | None = None) -> str:
    catalog = load_catalog()
    _check("signal", signal, catalog.signals)
    _check("method", method, catalog.methods)
    _check("task", task, catalog.tasks)
    _check("model", model, catalog.models)
    spec = catalog.methods[method]
    misfits = fit_problems(signal, method, task)
    if misfits:
        raise UsageError("; ".join(f"--{field}: {message}" for field, message in misfits))
    short = re.sub(r"[^a-z0-9]+", "-", model.split("/")[-1].lower()).strip("-")
    name = name or f"{method.replace('_', '-')}-{task}-{short}"
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise UsageError(f"--name {name!r} is not a slug: use lowercase letters, digits and '-'")
    defaults = {f.name: f.default for f in catalog.fields.values() if f.default is not None}
    defaults.update(spec.defaults)
    lr, lr_note = default_lr(catalog.models[model], spec)
    loss = catalog.losses[spec.default_loss]
    title = f"{spec.summary.split(';')[0].rstrip('.')} on {model.split('/')[-1]}"
    lines = [
        f"# yaml-language-server: $schema={SCHEMA_FILE.resolve().as_uri()}",
        f"# A recipe card for rtc. Compile it with: rtc compile {name}.yaml -o {name}.py",
        f"name: {name}  # names the compiled file and the run",
        f"title: {_yaml_str(title)}",
        f"signal: {signal}  # {catalog.signals[signal].summary}",
        f"method: {method}  # {spec.summary}",
        f"task: {task}  # {catalog.tasks[task].summary}",
        f"model: {model}  # {catalog.models[model].size}; see `rtc list models`",
        f"loss: {loss.name}  # allowed: {', '.join(spec.losses)}",
    ]
    if loss.config:
        lines.append("loss_config:")
        lines += [f"  {o.name}: {o.default:g}  # {o.summary}" for o in loss.config]
    fields = catalog.fields
    lines += [
        f"rank: {defaults['rank']}  # {fields['rank'].starter}",
        f"steps: {defaults['steps']}  # {fields['steps'].starter}",
        f"lr: {lr:g}  # {lr_note}",
        "sampling:",
        f"  max_tokens: {defaults['sampling']['max_tokens']}  # {spec.max_tokens_help}",
        f"  temperature: {defaults['sampling']['temperature']}",
        f"  top_p: {defaults['sampling']['top_p']}",
    ]
    for used in spec.fields:
        value = defaults[used.name]
        if used.name == "teacher" and value is None:
            value = same_tokenizer(catalog.models[model])[0]  # the biggest model that reads its tokens
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        lines.append(f"{used.name}: {shown}  # {used.comment}")
    lines += [
        f"{name}: {defaults[name]}  # {fields[name].starter}"
        for name in ("eval_every", "save_every", "seed", "overlong")
    ]
    lines += [
        "# system_prompt: null  # default: the task's system prompt",
        "# data:  # example datasets shipped with the card, relative to it (shown in the loop's header)",
        f"#   train: data/{task}.jsonl",
        f"#   eval: data/{task}.eval.jsonl",
    ]
    return "\n".join(lines) + "\n"
