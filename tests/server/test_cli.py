"""The command line: banner, API key, clean shutdown, start-up errors."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import tinker
from tiny_kit import REPO, start_server, stop_server


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtc.server", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def test_banner_names_the_url_and_key(server):
    banner = "".join(server.output)
    port = server.url.rsplit(":", 1)[1]
    assert f"ready on http://127.0.0.1:{port}\n" in banner
    assert f"  export TINKER_BASE_URL=http://127.0.0.1:{port}\n" in banner
    assert "  export TINKER_API_KEY=tml-local\n" in banner


def test_api_key_refuses_other_keys_and_sigterm_exits_cleanly(tmp_path):
    running = start_server(tmp_path / "state", "--api-key", "tml-secret", "--latency-ms", "20")
    try:
        health = f"{running.url}/api/v1/healthz"
        assert httpx.get(health, headers={"X-API-Key": "tml-other"}).status_code == 401
        assert httpx.get(health).status_code == 401
        start = time.perf_counter()
        assert httpx.get(health, headers={"X-API-Key": "tml-secret"}).json() == {"status": "ok"}
        assert time.perf_counter() - start >= 0.02  # --latency-ms 20
        with pytest.raises(tinker.AuthenticationError):
            wrong = tinker.ServiceClient(base_url=running.url, api_key="tml-wrong")
            wrong.create_sampling_client(base_model="any/model").result()
        client = tinker.ServiceClient(base_url=running.url, api_key="tml-secret")
        sampler = client.create_sampling_client(base_model="any/model").result()
        assert len(sampler.compute_logprobs(tinker.types.ModelInput.from_ints([1, 5, 9])).result()) == 3
    finally:
        code = stop_server(running)
    assert code == 0, "".join(running.output)
    assert "Traceback" not in "".join(running.output)


def test_ctrl_c_exits_cleanly(tmp_path):
    running = start_server(tmp_path / "state")
    running.process.send_signal(signal.SIGINT)
    assert running.process.wait(timeout=20) == 0
    assert "Traceback" not in "".join(running.output)


def test_port_in_use_is_an_error_without_traceback(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_cli("--model", "tiny", "--port", str(port), "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and "in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_bad_model_path_is_an_error_without_traceback(tmp_path):
    result = run_cli("--model", str(tmp_path / "missing"), "--port", "0", "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and "missing" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_help_has_an_example():
    result = run_cli("--help")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: rtc serve")
    assert "example:" in result.stdout and "--model tiny" in result.stdout


def test_a_local_model_directory_is_accepted(tiny_dir, tmp_path):
    from rtc.server.models import ModelPreparationError, prepare

    prepared = prepare(str(tiny_dir))
    assert prepared.path == tiny_dir.resolve() and str(tiny_dir.resolve()) in prepared.description
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelPreparationError, match="config.json"):
        prepare(str(tmp_path / "empty"))


@pytest.mark.parametrize("host", ["", "0.0.0.0", "::", "192.0.2.7"])
def test_a_host_other_machines_reach_needs_a_key(tmp_path, host):
    """`--host ''` used to listen everywhere without a key and print http://:PORT."""
    args = ("--model", "tiny", "--host", host, "--port", "0", "--state-dir", str(tmp_path))
    result = run_cli(*args, timeout=30)
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and "reachable from other machines" in result.stderr
    assert "--api-key" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--api-key", "secret"], "must start with 'tml-'"),
        (["--host", "0.0.0.0", "--api-key", "tml-short"], "at least 16 characters"),
        (["--max-body-mb", "0"], "--max-body-mb must be at least 1"),
        (["--max-body-mb", "8", "--max-inflated-mb", "4"], "--max-inflated-mb must be at least"),
    ],
)
def test_bad_keys_and_limits_are_usage_errors(tmp_path, args, complaint):
    result = run_cli("--model", "tiny", "--port", "0", "--state-dir", str(tmp_path), *args, timeout=30)
    assert result.returncode == 2 and complaint in result.stderr, result.stderr


def test_loopback_hosts_and_the_urls_shown_for_them():
    from rtc.server.cli import check_key, is_loopback, shown_url

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("", "0.0.0.0", "::", "10.0.0.1", "example.com"))
    assert check_key(None, "127.0.0.1") is None
    assert check_key("tml-" + "k" * 16, "0.0.0.0") is None
    assert shown_url("", 8000) == "http://127.0.0.1:8000"
    assert shown_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert shown_url("::", 8000) == "http://[::1]:8000"
    assert shown_url("::1", 8000) == "http://[::1]:8000"
