"""The golden files: generated/ is what `rtc build` produces now, and every loop in it is clean,
documents itself, and checks its example data without network or API key."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rtc.build import build_all
from rtc.cli import cli

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
GENERATED = ROOT / "generated"

CARDS = sorted(RECIPES.glob("*.yaml"))
LOOPS = sorted(GENERATED.glob("*.py"))


def test_generated_is_up_to_date():
    result = build_all(ROOT, check=True)
    assert result.errors == []
    stale = [str(p.relative_to(ROOT)) for p in result.stale]
    assert stale == [], f"stale generated files {stale}: run `rtc build` and commit generated/"


def test_every_card_has_a_loop_and_example_data():
    names = {yaml.safe_load(card.read_text())["name"] for card in CARDS}
    assert names == {loop.stem for loop in LOOPS}
    assert len(CARDS) >= 7
    for card in CARDS:
        data = yaml.safe_load(card.read_text())["data"]
        assert (card.parent / data["train"]).is_file()
        assert (card.parent / data["eval"]).is_file()


def test_build_check_names_a_stale_file(tmp_path, monkeypatch):
    shutil.copytree(RECIPES, tmp_path / "recipes")
    shutil.copytree(GENERATED, tmp_path / "generated")
    stale = tmp_path / "generated" / "sft-chat-qwen3.py"
    stale.write_text(stale.read_text().replace("BATCH_SIZE = 8", "BATCH_SIZE = 9"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["build", "--check"])
    assert result.exit_code == 1
    assert "stale: generated/sft-chat-qwen3.py" in result.stderr
    assert "BATCH_SIZE = 9" in stale.read_text()  # --check changes nothing
    result = CliRunner().invoke(cli, ["build"])
    assert result.exit_code == 0
    assert "BATCH_SIZE = 8" in stale.read_text()


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed with the test extra")
def test_generated_loops_pass_ruff():
    check = subprocess.run(["ruff", "check", "--no-cache", *map(str, LOOPS)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    # The loops also pass with ruff's own defaults, as a user's checkout would run it.
    isolated = subprocess.run(
        ["ruff", "check", "--isolated", "--no-cache", *map(str, LOOPS)], capture_output=True, text=True
    )
    assert isolated.returncode == 0, isolated.stdout
    fmt = subprocess.run(
        ["ruff", "format", "--check", "--no-cache", *map(str, LOOPS)], capture_output=True, text=True
    )
    assert fmt.returncode == 0, fmt.stdout


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINKER_")}
    env["TINKER_BASE_URL"] = "http://127.0.0.1:9"  # a dry run must not connect anywhere
    return env


@pytest.mark.parametrize("loop", LOOPS, ids=[p.stem for p in LOOPS])
def test_loop_help_documents_every_flag(loop):
    result = subprocess.run(
        [sys.executable, str(loop), "--help"], capture_output=True, text=True, env=_clean_env()
    )
    assert result.returncode == 0, result.stderr
    for flag in (
        "--data",
        "--eval-data",
        "--eval-every",
        "--log",
        "--steps",
        "--rank",
        "--lr",
        "--out",
        "--seed",
        "--resume",
        "--max-tokens",
        "--temperature",
        "--dry-run",
        "--save-every",
        "--model",
    ):
        assert flag in result.stdout


@pytest.mark.parametrize("card", CARDS, ids=[p.stem for p in CARDS])
def test_loop_dry_run_on_example_data(card):
    spec = yaml.safe_load(card.read_text())
    loop = GENERATED / f"{spec['name']}.py"
    data = card.parent / spec["data"]["train"]
    eval_data = card.parent / spec["data"]["eval"]
    result = subprocess.run(
        [sys.executable, str(loop), "--dry-run", "--data", str(data), "--eval-data", str(eval_data)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    n_rows = sum(1 for line in data.read_text().splitlines() if line.strip())
    assert f"({n_rows} rows)" in result.stdout
    assert "first" in result.stdout and "prompt" in result.stdout
    assert result.stdout.rstrip().endswith("dry run: data and plan are fine; nothing was sent")


def test_dry_run_writes_nothing(tmp_path):
    loop = GENERATED / "sft-chat-qwen3.py"
    result = subprocess.run(
        [sys.executable, str(loop), "--dry-run", "--data", str(RECIPES / "data" / "sft-chat.jsonl")],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_dataset_errors_name_file_and_line(tmp_path):
    loop = GENERATED / "sft-chat-qwen3.py"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "hi", "completion": "hello"}\n\n{"prompt": "hi"}\n', encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(loop), "--dry-run", "--data", str(bad)],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {bad}:3: missing key(s) completion; a row needs prompt, completion"
    )
    assert "Traceback" not in result.stderr


def test_generated_loops_import_nothing_from_rtc():
    for loop in LOOPS:
        text = loop.read_text()
        assert "import rtc" not in text and "from compiler" not in text and "from server" not in text
        assert not re.search(r"\{\{\s*[A-Za-z_]|\{%|%\}|\{#", text), loop  # no template residue


def test_header_names_the_card_and_its_hash():
    import hashlib

    card = RECIPES / "sdft-tool-agents-nemotron.yaml"
    digest = hashlib.sha256(card.read_bytes()).hexdigest()[:12]
    text = (GENERATED / "sdft-tool-agents-nemotron.py").read_text()
    assert f"Generated by rtc 0.1.0 from recipes/sdft-tool-agents-nemotron.yaml (sha256 {digest})." in text


def test_dry_run_renders_with_the_chat_template_when_the_tokenizer_is_local(tmp_path):
    models = pytest.importorskip("rtc.server.models")
    tiny = models.prepare_model("tiny")
    loop = GENERATED / "sft-chat-qwen3.py"
    result = subprocess.run(
        [
            sys.executable,
            str(loop),
            "--dry-run",
            "--data",
            str(RECIPES / "data" / "sft-chat.jsonl"),
            "--model",
            str(tiny),
        ],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    # The tiny model's ChatML template, with the generation prompt for the assistant's turn.
    assert "<|im_start|>user" in result.stdout and "<|im_start|>assistant" in result.stdout
    assert "not on this machine" not in result.stdout
