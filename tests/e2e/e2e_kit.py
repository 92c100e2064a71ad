"""Helpers shared by the end-to-end tests (imported by name: conftest puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"
DATA = ROOT / "recipes" / "data"


def loop_env(url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINKER_")}
    env.update(TINKER_BASE_URL=url, TINKER_API_KEY="tml-local", PYTHONUNBUFFERED="1")
    return env


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def train_records(path: Path) -> list[dict]:
    return [r for r in read_jsonl(path) if r["split"] == "train"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path
