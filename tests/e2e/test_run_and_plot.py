"""`rtc run` starts a server for a loop and stops it; `rtc plot` draws the loop's curves."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from e2e_kit import DATA, GENERATED


def rtc(*args: object, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from rtc.cli import main; main()", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def server_processes(cwd) -> set[str]:
    """Servers started by an `rtc run` in ``cwd`` (other tests on the machine start their own)."""
    # -ww: whole command lines (ps cuts them to the terminal's width, which pytest may set)
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        if "-m rtc.server --port 0 --model tiny" in line:
            pid = line.split()[0]
            try:
                if os.readlink(f"/proc/{pid}/cwd") == str(cwd):
                    found.add(pid)
            except OSError:
                continue
    return found


def test_rtc_run_trains_then_stops_its_server_and_plot_draws_the_curves(server, tmp_path):
    result = rtc(
        "run",
        "--model",
        "tiny",
        GENERATED / "sft-chat-qwen3.py",
        "--data",
        DATA / "sft-chat.jsonl",
        "--eval-data",
        DATA / "sft-chat.eval.jsonl",
        "--steps",
        "3",
        "--eval-every",
        "2",
        "--batch-size",
        "2",
        "--max-tokens",
        "4",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "rtc run:" in result.stderr and "step    2 | loss" in result.stdout
    assert server_processes(tmp_path) == set()  # the server it started is gone
    assert (tmp_path / "runs" / "rtc-serve.log").read_text().strip()

    metrics = tmp_path / "runs" / "sft-chat-qwen3" / "metrics.jsonl"
    plotted = rtc("plot", metrics, "-o", tmp_path / "curves.png", cwd=tmp_path)
    assert plotted.returncode == 0, plotted.stderr
    panels = "loss, optim/grad_norm, optim/lr, time/step"
    assert plotted.stdout.strip() == f"wrote {tmp_path / 'curves.png'} ({panels})"
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


PROBE = """
import os
import pathlib

import httpx

url, key = os.environ["TINKER_BASE_URL"], os.environ["TINKER_API_KEY"]
health = url + "/api/v1/healthz"
assert key.startswith("tml-") and key != "tml-local" and len(key) > 40, key
assert httpx.get(health, headers={"X-API-Key": key}).status_code == 200
assert httpx.get(health, headers={"X-API-Key": "tml-local"}).status_code == 401
for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
    try:
        seen = cmdline.read_bytes()
    except OSError:
        continue
    assert key.encode() not in seen, f"the key is on the command line of {cmdline.parent.name}"
pathlib.Path("key.txt").write_text(key)
"""


def test_rtc_run_gives_the_loop_a_fresh_key_through_the_environment(tmp_path):
    """The server of `rtc run` used to take every request: code that found its port could drive it."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    first = rtc("run", "--model", "tiny", probe, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    key = (tmp_path / "key.txt").read_text()
    assert rtc("run", "--model", "tiny", probe, cwd=tmp_path).returncode == 0
    assert (tmp_path / "key.txt").read_text() != key  # a new key for every run
    log = (tmp_path / "runs" / "rtc-serve.log").read_text()
    assert "TINKER_API_KEY=<key>" in log and key not in log + first.stderr  # shown redacted


def test_rtc_run_returns_the_loops_exit_status(tmp_path):
    bad = tmp_path / "empty.jsonl"
    bad.write_text("\n")
    result = rtc("run", "--model", "tiny", GENERATED / "sft-chat-qwen3.py", "--data", bad, cwd=tmp_path)
    assert result.returncode == 2
    assert f"error: {bad}: no rows" in result.stderr


def test_plot_panels_follow_the_metrics_present(tmp_path):
    pytest.importorskip("matplotlib")
    from rtc.plot import plot_metrics

    metrics = tmp_path / "m.jsonl"
    metrics.write_text(
        '{"step": 0, "split": "train", "loss": 1.0, "reward": 0.1, "accuracy": 0.0, "n_datums": 4}\n'
        '{"step": 0, "split": "eval", "reward": 0.2, "accuracy": 0.1, "n_datums": 8}\n'
        '{"step": 1, "split": "train", "loss": null, "reward": 0.5, "accuracy": 0.5, "n_datums": 0}\n'
    )
    assert plot_metrics(metrics, tmp_path / "c.png") == ["loss", "reward", "accuracy"]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_ctrl_c_under_rtc_run_reaches_the_loop_not_the_server(server, tmp_path):
    """A terminal's Ctrl-C signals the whole foreground group: the loop must still find the server
    up to save its checkpoint, and rtc run must return the loop's status."""
    import signal

    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from rtc.cli import main; main()",
            "run",
            "--model",
            "tiny",
            str(GENERATED / "sft-chat-qwen3.py"),
            "--data",
            str(DATA / "sft-chat.jsonl"),
            "--steps",
            "500",
            "--batch-size",
            "2",
            "--eval-every",
            "0",
            "--save-every",
            "0",
            "--max-tokens",
            "4",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, standing in for the terminal's foreground group
    )
    try:
        for line in process.stdout:
            if line.startswith("step    2"):
                break
        assert len(server_processes(tmp_path)) == 1  # its server, found by the pattern used below
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        for pid in server_processes(tmp_path):  # a failed test must not leave its server behind
            os.kill(int(pid), signal.SIGKILL)
    assert process.returncode == 130, err
    checkpoints = (tmp_path / "runs" / "sft-chat-qwen3" / "checkpoints.jsonl").read_text().splitlines()
    assert len(checkpoints) == 1  # saved through the server, which the signal did not reach
    assert server_processes(tmp_path) == set()


def test_rtc_serve_help_comes_from_the_server(tmp_path):
    result = rtc("serve", "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: rtc serve")
    assert "--state-dir" in result.stdout and "--latency-ms" in result.stdout
