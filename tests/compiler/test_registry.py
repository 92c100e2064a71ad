"""Methods and fields are data: a new method is one registry entry plus one template, with no Python
changed; and no text a card can hold changes a generated loop's code, for any method's template."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtc.build import compile_card
from rtc.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]

TOY_ENTRY = """
  toy:
    signal: demonstrations
    summary: Toy method of a test; trains on each demonstration REPEATS times per step.
    template: toy.py.j2
    losses: [cross_entropy]
    default_loss: cross_entropy
    defaults:
      steps: 7
      lr: 1.0e-4
      batch_size: 3
      sampling: {max_tokens: 32, temperature: 0.5, top_p: 1.0}
    fields:
      batch_size: {help: toy rows per step}
    rows_per_step: batch_size
    imports: [import itertools]
    primitives: [forward_backward, optim_step, save_state]
    loss_line: on every demonstration, repeated
    max_tokens_help: longest final sample, in tokens
"""

TOY_TEMPLATE = """{% extends "loop.py.j2" %}
{% set eval_state = "" %}
{% set checkpoint_state = "" %}
{% block constants %}
LOSS = "cross_entropy"  # next-token negative log-likelihood of the weighted (completion) tokens
LOSS_CONFIG = None  # cross_entropy takes no options
REPEATS = 2  # each demonstration is trained on this many times per step
{% endblock %}
{% block helpers %}


{% include "parts/demonstrations.j2" %}


def row_length(fmt, row: dict, args) -> int:
    return demonstration_length(fmt, row)


def dry_run(args, rows: list[dict], fmt) -> None:
    print(f"toy dry run: {len(rows)} rows, {REPEATS} repeats")
{% endblock %}
{% block step %}

        # ---- Datums: every demonstration, REPEATS times ----
        datums_D = [d for row in itertools.chain(*[batch] * REPEATS) for d in demonstration_datums(fmt, row)]
        metrics = {"train/n_datums": len(datums_D), "optim/lr": args.lr}
{% endblock %}
{% block progress %}
        print(f"step {step:4d} | loss {record['train/loss']:.4f}")
{% endblock %}
{% block plan %}
    print(f"   {args.batch_size} rows x {REPEATS} per step")
{% endblock %}
"""


def rtc_copy(tmp_path: Path) -> Path:
    """The rtc package as installed, copied: compiler/ as rtc/, templates/ as rtc/templates/."""
    package = tmp_path / "site" / "rtc"
    shutil.copytree(ROOT / "compiler", package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "templates", package / "templates", ignore=shutil.ignore_patterns("__pycache__"))
    return package


def run_rtc(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from rtc.cli import main; main()", *args],
        cwd=cwd,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_method_is_one_registry_entry_and_one_template(tmp_path):
    package = rtc_copy(tmp_path)
    python_before = {p.relative_to(package): p.read_bytes() for p in package.rglob("*.py")}
    methods = package / "catalog" / "methods.yaml"
    text = methods.read_text(encoding="utf-8")
    methods.write_text(text.replace("\nlosses:\n", TOY_ENTRY + "\nlosses:\n", 1), encoding="utf-8")
    (package / "templates" / "toy.py.j2").write_text(TOY_TEMPLATE, encoding="utf-8")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "Say hi.", "completion": "Hi."}) + "\n", encoding="utf-8")
    card = tmp_path / "toy.yaml"
    card.write_text(
        "name: toy-run\ntitle: A toy method\nsignal: demonstrations\nmethod: toy\ntask: chat\n"
        "model: Qwen/Qwen3-8B\nbatch_size: 5\n",
        encoding="utf-8",
    )
    site = package.parent

    listed = run_rtc(site, tmp_path, "list", "methods")
    assert listed.returncode == 0, listed.stderr
    assert "toy" in listed.stdout
    explained = run_rtc(site, tmp_path, "explain", str(card))
    assert explained.returncode == 0, explained.stderr
    assert "batch_size" in explained.stdout and "steps" in explained.stdout
    compiled = run_rtc(site, tmp_path, "compile", str(card), "-o", "toy_loop.py")
    assert compiled.returncode == 0, compiled.stderr
    loop = (tmp_path / "toy_loop.py").read_text(encoding="utf-8")
    assert "BATCH_SIZE = 5  # --batch-size: toy rows per step" in loop
    assert "STEPS = 7" in loop and "import itertools" in loop
    assert "--init-from --batch-size --max-tokens" in loop  # the header's flags come from the parser
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--line-length", "110", "toy_loop.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout
    helped = subprocess.run(
        [sys.executable, "toy_loop.py", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "toy rows per step" in helped.stdout
    dry = subprocess.run(
        [sys.executable, "toy_loop.py", "--dry-run", "--data", str(data)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    assert "toy dry run: 1 rows, 2 repeats" in dry.stdout and "5 rows x 2 per step" in dry.stdout
    # No Python file of rtc was touched to add the method.
    assert {p.relative_to(package): p.read_bytes() for p in package.rglob("*.py")} == python_before


HOSTILE = '"""; import os; os.system("x"); """ \\N{BULLET} {{ x }} {% if %} \u2028 \' # \\'
TASK_FOR_SIGNAL = {"environment": "math", "preferences": "chat", "demonstrations": "chat", "teacher": "math"}


def _code_shape(source: str) -> str:
    """The loop's AST with every string constant blanked: what the code does, not what it says."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


def _yaml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid double-quoted YAML scalar


@pytest.mark.parametrize("method", sorted(load_catalog().methods))
def test_hostile_text_in_every_text_field_changes_no_code(tmp_path, method):
    signal = load_catalog().methods[method].signal

    def compile_with(text: str, folder: str) -> str:
        where = tmp_path / folder
        where.mkdir()
        data = where / f"d{text[:40] if text else ''}.jsonl".replace("/", "_")
        data.write_text("{}\n", encoding="utf-8")
        card = where / "card.yaml"
        # The teacher signal's own text field: the system prompt only its teacher reads.
        teacher = f"teacher: Qwen/Qwen3-32B\nteacher_system_prompt: {_yaml_str(text)}\n"
        card.write_text(
            f"name: hostile\ntitle: {_yaml_str('T' + text)}\ndescription: {_yaml_str(text)}\n"
            f"system_prompt: {_yaml_str(text)}\nsignal: {signal}\nmethod: {method}\n"
            f"task: {TASK_FOR_SIGNAL[signal]}\nmodel: Qwen/Qwen3-8B\n{teacher if signal == 'teacher' else ''}"
            f"data: {{train: {_yaml_str(data.name)}, eval: {_yaml_str(data.name)}}}\n",
            encoding="utf-8",
        )
        return compile_card(card)[1]

    benign, hostile = compile_with("", "benign"), compile_with(HOSTILE, "hostile")
    assert _code_shape(hostile) == _code_shape(benign)
    tree = ast.parse(hostile)
    assert ast.get_docstring(tree, clean=False).startswith("T" + HOSTILE + "\n")
    prompt = next(
        n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SYSTEM_PROMPT"
    )
    assert ast.literal_eval(prompt) == HOSTILE
    if signal == "teacher":
        teacher_prompt = next(
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and n.targets[0].id == "TEACHER_SYSTEM_PROMPT"
        )
        assert ast.literal_eval(teacher_prompt) == HOSTILE
