"""End-to-end fixtures: one `rtc serve --model tiny` for the session, and a helper that runs a
generated loop against it as a user would (a subprocess with TINKER_BASE_URL set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# --import-mode=importlib keeps test folders off sys.path; the tests here share e2e_kit.py.
sys.path.insert(0, str(Path(__file__).parent))

from e2e_kit import GENERATED, loop_env  # noqa: E402


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The tiny model behind a real server process; its base URL."""
    pytest.importorskip("torch")
    pytest.importorskip("tinker")
    from rtc.runner import start_server, stop_server

    state = tmp_path_factory.mktemp("serve-state")
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    process, url = start_server("tiny", state_dir=state, log_path=log, api_key="tml-local")
    yield url
    stop_server(process)


@pytest.fixture(scope="session")
def family_server(tmp_path_factory):
    """family_server(base_model) -> base URL of the `rtc serve --model tiny-<family>` that serves that
    model in its family's real vocabulary; each started once, on first use."""
    pytest.importorskip("tml_renderers")
    from rtc.runner import start_server, stop_server
    from rtc.server.family_models import FAMILY_MODELS

    running: dict[str, tuple] = {}

    def url_for(base_model: str) -> str:
        family = next(f for f in FAMILY_MODELS.values() if f.serves(base_model))
        if family.name not in running:
            state = tmp_path_factory.mktemp(f"serve-{family.name}")
            log = state / "serve.log"
            running[family.name] = start_server(
                family.name, state_dir=state, log_path=log, api_key="tml-local"
            )
        return running[family.name][1]

    yield url_for
    for process, _ in running.values():
        stop_server(process)


@pytest.fixture
def run_loop(server, tmp_path):
    """run_loop(card_name, *args) -> CompletedProcess; the loop's cwd is tmp_path."""

    def run(
        name: str, *args: object, timeout: float = 240, url: str | None = None
    ) -> subprocess.CompletedProcess:
        command = [sys.executable, str(GENERATED / f"{name}.py"), *map(str, args)]
        return subprocess.run(
            command,
            cwd=tmp_path,
            env=loop_env(url or server),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
