"""Helpers shared by the server tests: starting ``rtc serve`` and plain-torch references."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tinker import types

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120
KEY = "tml-local"
# The shared test server keeps one SDK session for many tests, each making training clients.
ROOMY = ("--max-adapters-per-session", "1000", "--max-adapters", "1000")


@dataclass
class RunningServer:
    url: str
    state_dir: Path
    process: subprocess.Popen
    output: list[str]
    api_key: str


def start_server(
    state_dir: Path, *extra: str, api_key: str | None = KEY, model: str = "tiny"
) -> RunningServer:
    """Start ``python -m rtc.server --model MODEL --port 0`` and wait for its banner.

    The key goes in through ``$RTC_SERVE_API_KEY``; with ``api_key=None`` the server makes its
    own, read back from the banner.
    """
    env = {k: v for k, v in os.environ.items() if k != "RTC_SERVE_API_KEY"}
    if api_key is not None:
        env["RTC_SERVE_API_KEY"] = api_key
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtc.server",
            "--model",
            model,
            "--port",
            "0",
            "--state-dir",
            str(state_dir),
            "--threads",
            "1",
            *extra,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            output.append(line)
            match = re.search(r"TINKER_BASE_URL=(\S+)", line)
            if match:
                found["url"] = match.group(1)
            key = re.search(r"TINKER_API_KEY=(\S+)", line)
            if key:  # the last line of the banner
                found["key"] = key.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(START_TIMEOUT_S)
    if "url" not in found:
        process.kill()
        raise RuntimeError("server did not start:\n" + "".join(output))
    return RunningServer(found["url"], state_dir, process, output, found.get("key", ""))


def stop_server(server: RunningServer) -> int:
    server.process.terminate()
    try:
        return server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        return server.process.wait(timeout=5)


def next_token_datum(tokens: list[int], weights: list[float] | None = None, **inputs) -> types.Datum:
    """``model_input = tokens[:-1]``, ``target_tokens = tokens[1:]``."""
    loss_inputs = {"target_tokens": tokens[1:], **inputs}
    if weights is not None:
        loss_inputs["weights"] = weights
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=loss_inputs)


def reference_model(model_dir: Path, adapter_dir: Path | None = None):
    """The tiny model in plain transformers, with a saved LoRA adapter merged by hand."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    if adapter_dir is None:
        return model
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    scale = config["lora_alpha"] / config["r"]
    weights = load_file(str(adapter_dir / "adapter_model.safetensors"))
    modules = dict(model.named_modules())
    for key, a in weights.items():
        if ".lora_A." not in key:
            continue
        b = weights[key.replace(".lora_A.", ".lora_B.")]
        module_name = key.split(".lora_A.")[0].removeprefix("base_model.model.")
        with torch.no_grad():
            modules[module_name].weight += scale * (b @ a)
    return model


def reference_logprobs(model, tokens: list[int], targets) -> torch.Tensor:
    """Logprobs of ``targets`` ([N] or [N, K]) after each of ``tokens``, by plain torch."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    logsoftmax = torch.log_softmax(logits, dim=-1)
    targets = torch.as_tensor(targets)
    return logsoftmax.gather(1, targets.reshape(len(tokens), -1)).reshape(targets.shape)


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
