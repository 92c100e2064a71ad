"""Render a `ResolvedCard` into the source of one standalone loop.

One Jinja environment (trim and lstrip blocks, trailing newline kept, undefined names are errors)
with the filters from `rtc.literals`, the only way card values enter code. Templates get a
fully-defaulted card and a few derived values computed here; any logic deeper than that lives here,
not in the templates.
"""

from __future__ import annotations

import ast
import builtins
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2

from . import __version__
from .errors import RtcError
from .literals import py_comment, py_docstring, py_literal, py_str_block, wrap_text
from .resolve import ResolvedCard, data_path

# The templates ship as the package `rtc.templates` (the folder templates/ of the source tree).
TEMPLATES = Path(str(resources.files("rtc.templates")))

# What each Tinker primitive does in a loop, for the header docstring.
PRIMITIVES = {
    "sample": "sample completions from the current weights",
    "compute_logprobs": "log-probabilities of the reference model",
    "forward": "loss on held-out data, no gradients",
    "forward_backward": "accumulate LoRA gradients for a built-in loss",
    "forward_backward_custom": "gradients of a custom loss computed here from logprobs",
    "optim_step": "Adam update of the adapter",
    "save_state": "checkpoint weights + optimizer for --resume",
    "save_weights_for_sampler": "freeze weights to sample from (the reference policy)",
}

# Standard-library imports every loop needs, and those each method adds.
BASE_IMPORTS = {
    "argparse",
    "asyncio",
    "json",
    "os",
    "random",
    "signal",
    "socket",
    "sys",
    "time",
    "urllib.parse",
}
BASE_FROM_IMPORTS = {("dataclasses", "dataclass"), ("pathlib", "Path")}
METHOD_IMPORTS = {
    "sdft": ({"re"}, {("collections", "Counter")}),
    "grpo": ({"math"}, {("concurrent.futures", "ThreadPoolExecutor")}),
    "sft": (set(), set()),
    "dpo": ({"math"}, set()),
}
ROW_TYPE_NAMES = {"str": "str", "object (reaches the verifier)": "dict"}


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
        py_docstring=py_docstring,
        py_comment=py_comment,
        py_str_block=py_str_block,
        wrap=wrap_text,
    )
    return env


def verifier_source(name: str) -> tuple[list[str], str]:
    """Split a verifier module into its import lines and its body (docstring and imports dropped)."""
    source = (TEMPLATES / "verifiers" / f"{name}.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    imports: list[str] = []
    drop: set[int] = set()
    for node in tree.body:
        is_docstring = (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]
        )
        if isinstance(node, ast.Import | ast.ImportFrom) or is_docstring:
            drop.update(range(node.lineno - 1, node.end_lineno))
            if not is_docstring:
                imports.append(ast.get_source_segment(source, node))
    body = "\n".join(line for i, line in enumerate(lines) if i not in drop).strip("\n")
    return imports, body


def import_block(card: ResolvedCard, extra: list[str]) -> list[str]:
    """The loop's import lines, grouped and sorted the way ruff's isort rule expects."""
    plain = set(BASE_IMPORTS) | METHOD_IMPORTS[card.method.name][0]
    froms: dict[str, set[str]] = {}
    for module, name in BASE_FROM_IMPORTS | METHOD_IMPORTS[card.method.name][1]:
        froms.setdefault(module, set()).add(name)
    for line in extra:
        node = ast.parse(line).body[0]
        if isinstance(node, ast.Import):
            plain.update(alias.name for alias in node.names)
        else:
            froms.setdefault(node.module, set()).update(alias.name for alias in node.names)
    lines = ["from __future__ import annotations", ""]
    lines += [f"import {name}" for name in sorted(plain)]
    lines += [f"from {module} import {', '.join(sorted(names))}" for module, names in sorted(froms.items())]
    return lines


def _example_args(card: ResolvedCard) -> str:
    args = []
    if card.data_train:
        args.append(f"--data {data_path(card, card.data_train)}")
    else:
        args.append("--data train.jsonl")
    if card.data_eval:
        args.append(f"--eval-data {data_path(card, card.data_eval)}")
    return " ".join(args)


def context(card: ResolvedCard, filename: str) -> dict:
    method = card.method.name
    verifier_imports, verifier_body = ([], "")
    if card.signal.name == "environment" and card.task.verifier:
        verifier_imports, verifier_body = verifier_source(card.task.verifier)
    row_types = ", ".join(
        f"{py_literal(key)}: {ROW_TYPE_NAMES.get(kind, 'str') if key != 'prompt' else '(str, list)'}"
        for key, kind in card.signal.row.items()
    )
    # Size flags follow the fields the method uses (group_size -> --group-size).
    sizes = [name for name in ("group_size", "prompts_per_step", "batch_size") if name in card.method.uses]
    positive = ["steps", "rank", "max_tokens", *sizes]
    flags = ["--data", "--eval-data", "--eval-every", "--save-every", "--log", "--steps", "--rank", "--lr"]
    flags += ["--out", "--seed", "--resume", *(f"--{name.replace('_', '-')}" for name in sizes)]
    flags += ["--beta"] if method == "dpo" else []
    flags += ["--max-tokens", "--temperature", "--model", "--dry-run"]
    loss_line = card.loss.name
    if card.loss_config:
        loss_line += " (" + ", ".join(f"{k}={v:g}" for k, v in card.loss_config.items()) + ")"
    loss_line += {
        "sdft": " on on-policy rewrites of the demonstrations (the demonstration where a rewrite fails)",
        "sft": " on the demonstration tokens",
        "grpo": " with group-relative advantages from the task verifier",
        "dpo": " against the frozen initial weights",
    }[method]
    model = card.model
    size = (
        model.size + (f", context {model.context}" if model.context else "") + f", thinking {model.thinking}"
    )
    return {
        "card": card,
        "filename": filename,
        "rtc_version": __version__,
        "model_size": size,
        "loss_line": loss_line,
        "primitives": [(name, PRIMITIVES[name]) for name in card.method.primitives],
        "example_args": _example_args(card),
        "row_schema": "{" + ", ".join(f'"{k}": {v}' for k, v in card.signal.row.items()) + "}",
        "row_types": "{" + row_types + "}",
        "flags": flags,
        "imports": import_block(card, verifier_imports),
        "verifier_body": verifier_body,
        "positive_args": tuple(positive),
        "lr_origin": "from the card" if card.origins["lr"] == "card" else card.origins["lr"],
        "eot_origin": "from the catalog; checked against the tokenizer at start"
        if model.end_of_turn
        else "not in the catalog: taken from the tokenizer at start",
        "max_tokens_help": {
            "sdft": "longest rewrite, in tokens",
            "grpo": "longest rollout, in tokens",
        }.get(method, "longest final sample, in tokens"),
    }


def render(card: ResolvedCard, filename: str) -> str:
    template = environment().get_template(f"{card.method.name}.py.j2")
    source = template.render(**context(card, filename))
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
