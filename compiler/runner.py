"""`rtc run`: run a compiled loop against a local `rtc serve` started just for it.

The server runs in its own process group, so a Ctrl-C in the terminal reaches only the loop, which
finishes its step and saves a checkpoint while the server is still there to take it. The server
is stopped when the loop ends, however it ends, and the loop's exit status is returned.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .errors import RtcError, UsageError

READY = re.compile(r"TINKER_BASE_URL=(\S+)")
START_TIMEOUT_S = 600  # the first start converts SmolLM2 from GGUF (about 20 s here); be generous


def start_server(
    model: str, latency_ms: int = 0, log_path: Path | None = None, state_dir: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """Start `rtc serve` on a free port; return the process and its base URL once it is ready."""
    command = [sys.executable, "-m", "rtc.server", "--port", "0", "--model", model]
    if latency_ms:
        command += ["--latency-ms", str(latency_ms)]
    if state_dir is not None:
        command += ["--state-dir", str(state_dir)]
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # out of the terminal's process group: Ctrl-C is for the loop
        )
    except OSError as exc:
        raise RtcError(f"cannot start rtc serve: {exc}") from None
    log = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115 - closed by the drain thread
    deadline = time.monotonic() + START_TIMEOUT_S
    seen: list[str] = []
    url = None
    while url is None:
        line = process.stdout.readline()
        if not line:
            process.wait()
            tail = "".join(seen[-20:])
            raise RtcError(f"rtc serve exited with status {process.returncode} before it was ready:\n{tail}")
        seen.append(line)
        if log:
            log.write(line)
        print(f"[serve] {line}", end="", file=sys.stderr)
        match = READY.search(line)
        if match:
            url = match.group(1)
        elif time.monotonic() > deadline:
            stop_server(process)
            raise RtcError(f"rtc serve was not ready after {START_TIMEOUT_S} s")

    def drain() -> None:  # keep the pipe flowing; the server's log goes to the file
        for rest in process.stdout:
            if log:
                log.write(rest)
                log.flush()
        if log:
            log.close()

    threading.Thread(target=drain, daemon=True).start()
    return process, url


def stop_server(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not stopped within 10 s."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_loop(loop: str, loop_args: list[str], model: str = "smollm2", latency_ms: int = 0) -> int:
    """Start a server, run `python LOOP LOOP_ARGS` against it, stop the server; the loop's status."""
    if not Path(loop).is_file():
        raise UsageError(f"{loop}: no such file")
    log_path = Path("runs") / "rtc-serve.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    process, url = start_server(model, latency_ms, log_path)
    print(f"rtc run: {loop} against {url} (server log: {log_path})", file=sys.stderr)
    env = {**os.environ, "TINKER_BASE_URL": url, "TINKER_API_KEY": "tml-local"}
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the loop handles Ctrl-C itself
    try:
        return subprocess.call([sys.executable, loop, *loop_args], env=env)
    finally:
        signal.signal(signal.SIGINT, previous)
        stop_server(process)
