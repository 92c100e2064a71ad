"""Shared helpers for compiler tests: paths, a valid base card, and loading generated loops."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
GENERATED = ROOT / "generated"

BASE_CARD = """\
name: test-card
title: A test card
signal: demonstrations
method: sft
task: chat
model: Qwen/Qwen3-8B
"""


def load_loop(path: Path, name: str | None = None):
    """Import a generated loop file as a module (its names with hyphens are not importable)."""
    name = name or "loop_" + path.stem.replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def write_card(tmp_path):
    def write(text: str, name: str = "card.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
