"""How a loop fails: an unreachable service, a bad row mid-file, and Ctrl-C."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from e2e_kit import DATA, GENERATED, loop_env, read_jsonl


def test_unreachable_service_is_a_clear_error(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(GENERATED / "sft-chat-qwen3.py"), "--data", str(DATA / "sft-chat.jsonl")],
        cwd=tmp_path,
        env=loop_env(f"http://127.0.0.1:{port}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"error: cannot reach Tinker at http://127.0.0.1:{port}" in result.stderr
    assert "rtc serve" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30  # not the SDK's minutes of retries


def test_bad_row_mid_file_names_file_and_line(run_loop, tmp_path):
    rows = (DATA / "sft-chat.jsonl").read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "\n".join(rows[:5] + ['{"prompt": "hi", "completion": ["not", "text"]}'] + rows[5:]) + "\n"
    )
    result = run_loop("sft-chat-qwen3", "--data", bad, "--steps", "2")
    assert result.returncode == 2
    expected = f'error: {bad}:6: completion[0] must be {{"role": one of assistant, tool, "content": str}}'
    assert result.stderr.strip() == expected
    assert not (tmp_path / "runs").exists()  # nothing started


def test_ctrl_c_saves_a_checkpoint_then_exits(server, tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
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
        env=loop_env(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stdout:  # wait until training is under way
            if line.startswith("step    2"):
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted: finishing this step and saving a checkpoint" in out
    run_dir = tmp_path / "runs" / "sft-chat-qwen3"
    checkpoints = read_jsonl(run_dir / "checkpoints.jsonl")
    steps = [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    assert len(checkpoints) == 1 and checkpoints[0]["step"] == steps[-1] >= 2
    assert "Traceback" not in err
