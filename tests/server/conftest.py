"""Fixtures: one ``rtc serve --model tiny`` subprocess per test session, and the real SDK.

The server runs as a real subprocess (``python -m server``), started the way users and other
tools start it, and is found by parsing ``TINKER_BASE_URL`` from its stdout. Reference values
are computed with plain torch/transformers on the same tiny model directory, never through
the server's engine.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")

# The project runs pytest with --import-mode=importlib, which does not put test directories on
# sys.path; the tests here share helpers through tiny_kit.py next to this file.
sys.path.insert(0, str(Path(__file__).parent))

from tiny_kit import ROOMY, RunningServer, start_server, stop_server  # noqa: E402

from rtc.server.models import prepare_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    return prepare_model("tiny")


@pytest.fixture(scope="session")
def server(tmp_path_factory, tiny_dir) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("serve-state"), *ROOMY)
    yield running
    code = stop_server(running)
    assert code == 0, "".join(running.output[-40:])


@pytest.fixture(scope="session")
def service(server):
    client = tinker.ServiceClient(base_url=server.url, api_key="tml-local")
    yield client


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_dir))


@pytest.fixture(scope="session")
def sentence(tokenizer) -> list[int]:
    return tokenizer.encode("The quick brown fox jumps over the lazy dog. What is 2 + 2? The answer is 4.")
