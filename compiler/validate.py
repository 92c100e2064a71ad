"""Validate a card: the JSON Schema first, then the rules that tie fields together.

Every problem is collected and reported at once, each located at the line and column of the value
(or key) it concerns, with the fix in the message where there is one.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from pathlib import Path

import jsonschema

from .card import RawCard, dotted
from .catalog import load_catalog, same_tokenizer
from .errors import CardError, Problem
from .rewards import reward_problems
from .schema import card_schema


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = card_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def did_you_mean(word: object, choices: list[str] | tuple[str, ...]) -> str:
    """`; did you mean 'x'?` for the closest choice, or an empty string."""
    if not isinstance(word, str):
        return ""
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    if not close:
        # Model names are long: match on the part after the organisation too.
        tails = {c.split("/")[-1].lower(): c for c in choices}
        close_tail = difflib.get_close_matches(word.split("/")[-1].lower(), list(tails), n=1, cutoff=0.6)
        return f"; did you mean '{tails[close_tail[0]]}'?" if close_tail else ""
    return f"; did you mean '{lowered[close[0]]}'?"


def schema_problems(card: RawCard) -> list[Problem]:
    problems = []
    for error in _validator().iter_errors(card.data):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties":
            allowed = list(error.schema.get("properties", {}))
            extra = [k for k in error.instance if k not in allowed]
            for key in extra:
                problems.append(
                    card.problem((*path, key), f"unknown field{did_you_mean(key, allowed)}", key=True)
                )
        elif error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            line, col = card.where(path)
            problems.append(Problem(card.file, line, col, dotted((*path, missing)), "missing required field"))
        elif error.validator == "enum":
            choices = [str(c) for c in error.validator_value]
            hint = did_you_mean(error.instance, choices)
            shown = ", ".join(choices) if len(choices) <= 8 else f"see `rtc list {_list_for(path)}`"
            problems.append(card.problem(path, f"{error.instance!r} is not one of: {shown}{hint}"))
        elif error.validator == "propertyNames" and path == ("tool_timeouts",):
            problems.append(card.problem(path, f"unknown tool: {error.message}; see `rtc list tools`"))
        elif error.validator == "propertyNames":
            problems.append(card.problem(path, f"unknown loss option: {error.message}"))
        elif error.validator == "type":
            expected = error.validator_value
            expected = " or ".join(expected) if isinstance(expected, list) else expected
            problems.append(
                card.problem(
                    path, f"expected {expected}, got {_type_name(error.instance)} {error.instance!r}"
                )
            )
        elif error.validator == "pattern" and path == ("name",):
            problems.append(
                card.problem(path, f"{error.instance!r} is not a slug: use lowercase letters, digits and '-'")
            )
        else:
            problems.append(card.problem(path, error.message))
    return problems


def _list_for(path: tuple) -> str:
    return {"model": "models", "task": "tasks", "loss": "losses", "method": "methods"}.get(
        str(path[0]) if path else "", "models"
    )


def _type_name(value: object) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
    }.get(type(value), type(value).__name__)


def fit_problems(signal: str, method: str, task: str) -> list[tuple[str, str]]:
    """Whether a signal, a method and a task fit together: (field, message) for each that does not.
    `rtc validate` and `rtc new` both ask this."""
    catalog = load_catalog()
    problems = []
    spec = catalog.methods[method]
    if spec.signal != signal:
        fits = sorted(m for m, s in catalog.methods.items() if s.signal == signal)
        message = (
            f"method {method} learns from {spec.signal}, not {signal}; for {signal} use: {', '.join(fits)}"
        )
        problems.append(("method", message))
    if signal not in catalog.tasks[task].signals:
        fits = sorted(t for t, s in catalog.tasks.items() if signal in s.signals)
        problems.append(
            ("task", f"task {task} does not fit signal {signal}; for {signal} use: {', '.join(fits)}")
        )
    return problems


def rule_problems(card: RawCard) -> list[Problem]:
    """Cross-field rules. Only run on a card that passed the schema, so the types are right."""
    catalog = load_catalog()
    data = card.data
    problems = []
    signal = catalog.signals[data["signal"]]
    method = catalog.methods[data["method"]]
    task = catalog.tasks[data["task"]]
    model = catalog.models[data["model"]]

    for field, message in fit_problems(signal.name, method.name, task.name):
        problems.append(card.problem((field,), message))
    loss_name = data.get("loss", method.default_loss)
    if loss_name not in method.losses:
        problems.append(
            card.problem(
                ("loss",),
                f"loss {loss_name} does not fit method {method.name}; use one of: {', '.join(method.losses)}",
            )
        )
    else:
        options = [opt.name for opt in catalog.losses[loss_name].config]
        for key in data.get("loss_config", {}):
            if key not in options:
                allowed = ", ".join(options) if options else "none"
                problems.append(
                    card.problem(
                        ("loss_config", key),
                        f"loss {loss_name} takes no option '{key}' (it takes: {allowed})",
                        key=True,
                    )
                )
        for key, value in data.get("loss_config", {}).items():
            if key in ("clip_low_threshold", "clip_high_threshold", "beta") and value <= 0:
                problems.append(card.problem(("loss_config", key), "must be greater than 0"))
        low = data.get("loss_config", {}).get("clip_low_threshold")
        high = data.get("loss_config", {}).get("clip_high_threshold")
        if low is not None and high is not None and not low < 1 < high:
            problems.append(
                card.problem(
                    ("loss_config",),
                    "clip thresholds must satisfy clip_low_threshold < 1 < clip_high_threshold",
                )
            )

    per_method = [f.name for f in catalog.fields.values() if f.per_method]
    for name in per_method:
        if name in data and name not in method.uses:
            users = sorted(m for m, spec in catalog.methods.items() if name in spec.uses)
            problems.append(
                card.problem(
                    (name,),
                    f"does not apply to method {method.name} (only to {', '.join(users)}); remove it",
                    key=True,
                )
            )
    for field in catalog.fields.values():
        if field.name not in data:
            continue
        if field.tasks and task.name not in field.tasks:
            where = ", ".join(field.tasks)
            problems.append(card.problem((field.name,), f"applies to task {where} only; remove it", key=True))
        elif field.methods and method.name not in field.methods:
            where = ", ".join(field.methods)
            problems.append(
                card.problem(
                    (field.name,), f"applies to method {where} only, not {method.name}; remove it", key=True
                )
            )
    problems += tool_problems(card)
    if method.name == "grpo" and data.get("group_size", 2) < 2:
        problems.append(
            card.problem(
                ("group_size",), "grpo needs at least 2 samples per prompt to compare them; use 4 to 16"
            )
        )

    problems += teacher_problems(card, method, model)

    renderer = catalog.renderers[model.renderer]
    if "thinking" in data and not renderer.switchable:
        modes = "/".join(renderer.modes)
        problems.append(
            card.problem(
                ("thinking",),
                f"{model.name} has no thinking switch (its format, {renderer.name}, is {modes} only); "
                "remove it",
                key=True,
            )
        )
    temperature = data.get("sampling", {}).get("temperature", method.defaults["sampling"]["temperature"])
    if loss_name in catalog.losses and catalog.losses[loss_name].ratio and temperature != 1:
        problems.append(
            card.problem(
                ("sampling", "temperature"),
                f"{loss_name} compares the trainer's logprobs (at temperature 1) with the sampler's (at the "
                f"sampling temperature): at {temperature:g} their ratio is off from the first step and rare "
                "tokens get clipped; use temperature 1 (tinker-cookbook pins it for RL)",
            )
        )

    max_length = data.get("max_length")
    if max_length is not None and model.context is not None and max_length > model.context:
        problems.append(
            card.problem(
                ("max_length",), f"{model.name} has a context of {model.context} tokens; use at most that"
            )
        )
    max_tokens = data.get("sampling", {}).get("max_tokens")
    limit = max_length or model.context
    if max_tokens is not None and limit is not None and max_tokens >= limit:
        problems.append(
            card.problem(
                ("sampling", "max_tokens"),
                f"must leave room for the prompt: {max_tokens} >= max length {limit}",
            )
        )

    problems += reward_problems(card)  # reward, reward_model, judge, rubric, length_penalty
    base = Path(card.file).parent
    for split, rel in data.get("data", {}).items():
        if not (base / rel).is_file():
            problems.append(card.problem(("data", split), f"no such file: {base / rel}"))
    return problems


TINKER_CHECKPOINT = re.compile(r"tinker://[^/\s]+/(weights|sampler_weights)/[^/\s]+")


def teacher_problems(card: RawCard, method, model) -> list[Problem]:
    """The teacher of a distillation card: a checkpoint, or a model that reads the student's tokens
    (the teacher scores the student's own tokens, so they must share a tokenizer)."""
    if "teacher" not in method.uses:
        return []
    teacher = card.data.get("teacher")
    fits = same_tokenizer(model)
    if teacher is None:
        if method.name == "distill" or card.data.get("teacher_system_prompt") is None:
            why = (
                "distill needs a teacher"
                if method.name == "distill"
                else "with neither a teacher nor a teacher_system_prompt the student learns its own answers"
            )
            line, col = card.where(("method",))
            message = (
                f"{why}: add `teacher: {fits[0]}` (a model with the student's tokenizer) "
                "or a tinker:// checkpoint"
            )
            return [Problem(card.file, line, col, "teacher", message)]
        return []
    if teacher.startswith("tinker://"):
        if not TINKER_CHECKPOINT.fullmatch(teacher):
            return [
                card.problem(
                    ("teacher",),
                    f"{teacher!r} is not a checkpoint path: use tinker://<run>/weights/<name> or "
                    "tinker://<run>/sampler_weights/<name>",
                )
            ]
        return []
    catalog = load_catalog()
    if teacher not in catalog.models:
        hint = did_you_mean(teacher, list(catalog.models))
        message = f"unknown model {teacher!r}{hint}; or give a tinker:// checkpoint"
        return [card.problem(("teacher",), message)]
    if teacher not in fits:
        shown = ", ".join(fits[:4]) + (", ..." if len(fits) > 4 else "")
        return [
            card.problem(
                ("teacher",),
                f"{teacher} reads other tokens than {model.name}: the teacher scores the student's own "
                f"tokens, so they must share a tokenizer; use one of: {shown}",
            )
        ]
    return []


def tool_problems(card: RawCard) -> list[Problem]:
    """The rules of a tool-agents card's tools (the fields themselves are checked by the schema)."""
    catalog = load_catalog()
    data = card.data
    if data["task"] != "tool-agents":
        return []
    problems = []
    model = catalog.models[data["model"]]
    renderer = catalog.renderers[model.renderer]
    tools = data.get("tools", [])
    if data["method"] == "grpo" and not tools:
        problems.append(
            card.problem(
                ("task",),
                "grpo on tool-agents runs episodes in which the model calls tools: list them, e.g. "
                "tools: [search, calculator] (see `rtc list tools`)",
            )
        )
    if tools and not renderer.tools:
        problems.append(
            card.problem(
                ("tools",),
                f"{model.name} has no tool format rtc can render (its format, {renderer.name}, cannot "
                "declare tools); choose a model whose format can (`rtc list models`)",
            )
        )
    for name in data.get("tool_timeouts", {}):
        if name in catalog.tools and name not in tools:
            problems.append(
                card.problem(("tool_timeouts", name), f"times {name}, which tools does not list", key=True)
            )
    if "corpus" in data:
        readers = [name for name in tools if name in catalog.tools and catalog.tools[name].corpus]
        if not readers:
            problems.append(
                card.problem(
                    ("corpus",), "only search and lookup read a corpus, and tools lists neither", key=True
                )
            )
        path = Path(card.file).parent / data["corpus"]
        if not path.is_file():
            problems.append(card.problem(("corpus",), f"no such file: {path}"))
    return problems


def validate(card: RawCard) -> None:
    """Raise `CardError` with every problem of the card, or return if it is valid."""
    problems = schema_problems(card)
    if not problems:
        problems = rule_problems(card)
    if problems:
        raise CardError(problems)
