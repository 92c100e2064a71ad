"""The `rtc` command line as a user drives it: help, exit codes, stdout/stderr, files written."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from rtc import __version__
from rtc.card import load_card
from rtc.cli import cli

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
GENERATED = ROOT / "generated"
CATALOG = ROOT / "compiler" / "catalog"
SCHEMA_FILE = ROOT / "compiler" / "schema" / "card.schema.json"
CARDS = sorted(RECIPES.glob("*.yaml"))
COMMANDS = [
    "compile",
    "validate",
    "build",
    "list",
    "schema",
    "explain",
    "new",
    "serve",
    "run",
    "plot",
    "export",
]
NEW_ARGS = "new --signal environment --method grpo --task math --model Qwen/Qwen3-8B".split()
INVALID_CARD = "name: broken\ntitle: Broken\nsignal: demonstrations\nmethod: sft\ntask: chat\n" + (
    "model: Qwen/Qwen3-8b\n"
)
TYPO = "'Qwen/Qwen3-8b' is not one of: see `rtc list models`; did you mean 'Qwen/Qwen3-8B'?"


def rtc(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


# --- help, version, docs ---------------------------------------------------------------------------


def test_help_lists_every_command():
    result = rtc("--help")
    assert result.exit_code == 0
    listed = re.findall(r"^  (\S+)  ", result.stdout.split("Commands:")[1], flags=re.M)
    assert sorted(listed) == sorted(COMMANDS)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "serve"])
def test_every_command_help_shows_an_example(command):
    result = rtc(command, "--help")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: ") and f" {command} " in result.stdout.splitlines()[0]
    assert f"rtc {command}" in result.stdout.split("Example")[1]  # an example of this very command


def test_version():
    result = rtc("--version")
    assert result.exit_code == 0
    assert result.stdout == f"rtc, version {__version__}\n"
    assert __version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_readme_mentions_every_command():
    readme = ROOT / "README.md"
    assert readme.is_file(), "README.md is missing"
    text = readme.read_text(encoding="utf-8")
    # As inline code (`rtc compile CARD`) or a line of a code block (`rtc compile ...`, `$ rtc compile ...`).
    missing = [c for c in COMMANDS if not re.search(rf"(^|`)(\$ )?rtc {c}\b", text, flags=re.M)]
    assert missing == [], f"README.md never shows these commands: {missing}"


# --- compile --------------------------------------------------------------------------------------


@pytest.mark.parametrize("card", CARDS, ids=[c.stem for c in CARDS])
@pytest.mark.parametrize("output", [[], ["-o", "-"]], ids=["no-o", "o-dash"])
def test_compile_prints_the_golden_loop(at_root, card, output):
    result = rtc("compile", f"recipes/{card.name}", *output)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith('"""')
    assert result.stdout == (GENERATED / f"{card.stem}.py").read_text(encoding="utf-8")
    assert result.stderr == ""
    ast.parse(result.stdout)


def test_compile_to_a_file_is_atomic_and_says_so(at_root, tmp_path):
    out = tmp_path / "out" / "grpo-math-qwen3.py"
    result = rtc("compile", "recipes/grpo-math-qwen3.yaml", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == f"wrote {out} (grpo on Qwen/Qwen3-8B)\n"
    assert out.read_bytes() == (GENERATED / "grpo-math-qwen3.py").read_bytes()
    ast.parse(out.read_text(encoding="utf-8"))
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temp file left behind


def test_compile_of_an_invalid_card_leaves_the_output_untouched(tmp_path):
    card = tmp_path / "broken.yaml"
    card.write_text(INVALID_CARD, encoding="utf-8")
    out = tmp_path / "loop.py"
    out.write_text("previous\n", encoding="utf-8")
    result = rtc("compile", str(card), "-o", str(out))
    assert result.exit_code == 1
    assert TYPO in result.stderr
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.yaml", "loop.py"]


def test_compile_to_an_unwritable_path_is_an_error_not_a_traceback(tmp_path):
    # BUG (today): IsADirectoryError escapes write_atomic and click prints a traceback.
    result = rtc("compile", str(RECIPES / "grpo-math-qwen3.yaml"), "-o", str(tmp_path))
    assert not isinstance(result.exception, OSError), result.exception
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ")
    assert list(tmp_path.iterdir()) == []  # the temp file is gone


# --- validate -------------------------------------------------------------------------------------


def test_validate_every_recipe(at_root):
    paths = [f"recipes/{c.name}" for c in CARDS]
    result = rtc("validate", *paths)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"{p}: ok" for p in paths]


def test_validate_reports_only_the_invalid_card(tmp_path):
    good = RECIPES / "sft-chat-qwen3.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(INVALID_CARD, encoding="utf-8")
    result = rtc("validate", str(good), str(bad))
    assert result.exit_code == 1
    assert result.stdout == f"{good}: ok\n"
    assert result.stderr.splitlines() == [f"{bad}:6:8: model: {TYPO}", "1 problem found"]


def test_validate_without_cards_is_a_usage_error():
    result = rtc("validate")
    assert result.exit_code == 2
    assert "Missing argument" in result.stderr


# --- list, schema, explain ------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["models", "signals", "methods", "tasks", "losses"])
def test_list_each_catalog(what):
    result = rtc("list", what)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    unknown = rtc("list", what[:-1] + "z")
    assert unknown.exit_code == 2
    assert f"'{what[:-1]}z' is not one of" in unknown.stderr


def test_list_models_names_every_catalog_model_with_its_size():
    models = [m["name"] for m in yaml.safe_load((CATALOG / "models.yaml").read_text())["models"]]
    lines = rtc("list", "models").stdout.splitlines()
    assert [line.split()[0] for line in lines] == models
    nano = next(line for line in lines if line.startswith("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 "))
    assert "MoE, 30B total / 3B active" in nano


def test_list_methods_shows_signal_and_losses():
    methods = yaml.safe_load((CATALOG / "methods.yaml").read_text())["methods"]
    lines = {line.split()[0]: line for line in rtc("list", "methods").stdout.splitlines()}
    assert set(lines) == set(methods)
    for name, spec in methods.items():
        assert f"signal {spec['signal']} " in lines[name]
        assert f"losses {','.join(spec['losses'])} " in lines[name]


def test_schema_prints_the_shipped_schema_and_every_card_fits_it():
    result = rtc("schema")
    assert result.exit_code == 0
    assert result.stdout == SCHEMA_FILE.read_text(encoding="utf-8")
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for card in CARDS:
        validator.validate(load_card(card).data)  # YAML 1.2 numbers, as an editor reads them


def _explain(card: str) -> dict[str, str]:
    result = rtc("explain", "--no-cost", card)
    assert result.exit_code == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.startswith(f"# {card} (sha256 ")
    rows = [re.fullmatch(r"(\S+) +(.+?)  <- (.+)", line) for line in lines]
    assert all(rows), lines
    names = [row[1] for row in rows]
    assert len(names) == len(set(names))  # one line per field
    return {row[1]: row[3] for row in rows}


def test_explain_marks_card_values_and_default_origins(at_root):
    card = "recipes/sdft-tool-agents-nemotron.yaml"
    origins = _explain(card)
    data = yaml.safe_load((ROOT / card).read_text())
    for key, value in data.items():
        for field in [f"{key}.{sub}" for sub in value] if isinstance(value, dict) else [key]:
            assert origins[field] == "card", field
    assert origins["sampling.top_p"] == "default of method sdft"
    assert origins["seed"] == "default"


def test_explain_names_the_learning_rate_rule(at_root):
    assert _explain("recipes/sft-chat-qwen3.yaml")["lr"].startswith("qwen LoRA rule")
    assert _explain("recipes/grpo-math-qwen3.yaml")["lr"] == "tinker-cookbook RL recipe math_rl (Qwen3-8B)"
    assert _explain("recipes/grpo-json-gpt-oss.yaml")["lr"].startswith("tinker-cookbook RL recipes rl_basic")


def test_explain_shows_the_chat_format_its_thinking_mode_and_what_is_trained(at_root):
    CARD = "recipes/grpo-math-qwen3.yaml"  # noqa: N806
    lines = rtc("explain", "--no-cost", CARD).stdout.splitlines()[1:]
    shown = {line.split()[0]: " ".join(line.split()[1:]) for line in lines}
    assert shown["format"] == "'qwen3 (tml-renderers Qwen3)' <- catalog: Qwen/Qwen3-8B"
    assert shown["thinking"] == "'on' <- renderer qwen3 default"
    assert shown["trained"] == "'<think>\\n\\n</think>\\n\\nANSWER<|im_end|>' <- renderers.yaml"


# --- new ------------------------------------------------------------------------------------------


def test_new_writes_a_card_that_validates_and_compiles(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = rtc(*NEW_ARGS, "-o", "x.yaml")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == "wrote x.yaml; next: rtc compile x.yaml -o loop.py\n"
    assert rtc("validate", "x.yaml").stdout == "x.yaml: ok\n"
    compiled = rtc("compile", "x.yaml")
    assert compiled.exit_code == 0, compiled.stderr
    ast.parse(compiled.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


def test_new_prints_the_card_without_o(tmp_path):
    result = rtc(*NEW_ARGS)
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["name"] == "grpo-math-qwen3-8b"
    assert result.stderr == ""


def test_new_refuses_to_overwrite(tmp_path):
    target = tmp_path / "x.yaml"
    target.write_text("mine\n", encoding="utf-8")
    result = rtc(*NEW_ARGS, "-o", str(target))
    assert result.exit_code == 2
    assert result.stderr == f"Error: {target} exists; choose another -o or remove it\n"
    assert target.read_text(encoding="utf-8") == "mine\n"


def test_new_rejects_a_method_of_another_signal_and_suggests_a_model():
    result = rtc(*[a if a != "grpo" else "dpo" for a in NEW_ARGS])
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: --method: method dpo learns from preferences, not environment; for environment use: grpo\n"
    )
    result = rtc(*NEW_ARGS[:-1], "Qwen/Qwen3-8b")
    assert result.exit_code == 2
    assert "unknown model 'Qwen/Qwen3-8b'; did you mean 'Qwen/Qwen3-8B'?" in result.stderr


# --- build ----------------------------------------------------------------------------------------


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_build_writes_every_loop_then_is_up_to_date(tmp_path, monkeypatch):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    (tmp_path / "generated").mkdir()
    (tmp_path / "generated" / "old-card.py").write_text("stale\n")
    monkeypatch.chdir(tmp_path)

    result = rtc("build")
    assert result.exit_code == 0, result.stderr
    wrote = {f"wrote generated/{c.stem}.py" for c in CARDS}
    # A project other than rtc's own checkout gets no schema file written into it or the package.
    assert set(result.stdout.splitlines()) == wrote | {"removed generated/old-card.py"}
    assert _snapshot(tmp_path / "generated") == _snapshot(GENERATED)
    assert not (tmp_path / "compiler").exists()

    again = rtc("build")
    assert again.exit_code == 0
    assert again.stdout == "generated/ is up to date\n"

    (tmp_path / "generated" / "sft-chat-qwen3.py").unlink()
    before = _snapshot(tmp_path / "generated")
    card = tmp_path / "recipes" / "grpo-math-qwen3.yaml"
    card.write_text(re.sub(r"^steps: \d+", "steps: 0", card.read_text(), flags=re.M))
    broken = rtc("build")
    assert broken.exit_code == 1
    assert "recipes/grpo-math-qwen3.yaml" in broken.stderr and "steps" in broken.stderr
    assert broken.stderr.rstrip().endswith("nothing was written")
    assert _snapshot(tmp_path / "generated") == before


# --- start-up cost --------------------------------------------------------------------------------

IMPORT_PROBE = """
import sys, rtc.cli
from click.testing import CliRunner
card = "recipes/grpo-math-qwen3.yaml"
for args in (["compile", card], ["validate", card], ["explain", card], ["list", "models"], ["schema"]):
    result = CliRunner().invoke(rtc.cli.cli, args)
    assert result.exit_code == 0, result.output
print(sorted({"torch", "transformers", "tinker", "rtc.server", "numpy"} & set(sys.modules)))
"""


def test_cli_imports_no_heavy_module():
    probe = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout == "[]\n"


def test_installed_under_one_import_name(tmp_path):
    """rtc installs as `rtc` (compiler/), `rtc.server` and `rtc.templates`: no top-level `compiler`,
    `server` or `templates` package that would collide with another distribution."""
    probe = (
        "import importlib.util, rtc, rtc.server, rtc.templates, rtc.render\n"
        "print([importlib.util.find_spec(n) is None for n in ('compiler', 'server', 'templates')])\n"
        "print((rtc.render.TEMPLATES / 'loop.py.j2').is_file())\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[True, True, True]\nTrue\n"


def test_every_template_file_is_packaged():
    """A non-editable install ships only what package-data names: every file a card may inline (the
    method templates, their parts, the verifier, judge and tool modules) must match one of its globs."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    templates = ROOT / "templates"
    packaged = {path for pattern in globs["rtc.templates"] for path in templates.glob(pattern)}
    files = {p for p in templates.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    files -= {templates / "__init__.py"}  # a module of the package, not data
    assert sorted(str(p.relative_to(templates)) for p in files - packaged) == []
