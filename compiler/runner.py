"""`rtc run`: run a compiled loop against a local `rtc serve` started just for it.

The server runs in its own process group, so a Ctrl-C in the terminal reaches only the loop, which
finishes its step and saves a checkpoint while the server is still there to take it. The server
is stopped when the loop ends, however it ends, and the loop's exit status is returned.

Each run makes a random API key and hands it to both through the environment (never the command
line, which every user of the machine can read in the process list): the server takes it from
`RTC_SERVE_API_KEY`, the loop from `TINKER_API_KEY`. Other processes that find the port cannot
use the server without it.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .errors import RtcError, UsageError

READY = re.compile(r"TINKER_BASE_URL=(\S+)")
START_TIMEOUT_S = 600  # the first start converts SmolLM2 from GGUF (about 20 s here); be generous
SERVER_KEY_ENV = "RTC_SERVE_API_KEY"  # where `rtc serve` reads its key


def new_api_key() -> str:
    return "tml-" + secrets.token_urlsafe(32)


def start_server(
    model: str,
    latency_ms: int = 0,
    log_path: Path | None = None,
    state_dir: Path | None = None,
    *,
    api_key: str,
) -> tuple[subprocess.Popen, str]:
    """Start `rtc serve` on a free port with `api_key`; return the process and its base URL once
    it is ready. The key is shown as `<key>` in what the server prints."""
    command = [sys.executable, "-m", "rtc.server", "--port", "0", "--model", model]
    if latency_ms:
        command += ["--latency-ms", str(latency_ms)]
    if state_dir is not None:
        command += ["--state-dir", str(state_dir)]
    try:
        process = subprocess.Popen(
            command,
            env={**os.environ, SERVER_KEY_ENV: api_key},
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
        line = line.replace(api_key, "<key>")
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
                log.write(rest.replace(api_key, "<key>"))
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
    api_key = new_api_key()
    process, url = start_server(model, latency_ms, log_path, api_key=api_key)
    print(f"rtc run: {loop} against {url} (server log: {log_path})", file=sys.stderr)
    env = {**os.environ, "TINKER_BASE_URL": url, "TINKER_API_KEY": api_key}
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the loop handles Ctrl-C itself
    try:
        return subprocess.call([sys.executable, loop, *loop_args], env=env)
    finally:
        signal.signal(signal.SIGINT, previous)
        stop_server(process)
