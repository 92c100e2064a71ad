"""``rtc serve --dtype`` and ``--threads``: usage errors, and a bfloat16 server that trains and samples."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tinker
from tinker import types
from tiny_kit import REPO, next_token_datum, start_server, stop_server


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rtc.server", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--threads", "0"], "--threads must be >= 1"), (["--dtype", "float8"], "invalid choice: 'float8'")],
)
def test_bad_engine_flags_are_usage_errors(tmp_path, args, message):
    result = run_cli("--model", "tiny", "--port", "0", "--state-dir", str(tmp_path), *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_bfloat16_server_trains_and_samples(tmp_path, sentence):
    running = start_server(tmp_path / "state", "--dtype", "bfloat16")
    try:
        service = tinker.ServiceClient(base_url=running.url, api_key="tml-local")
        client = service.create_lora_training_client(base_model="any/model", rank=4, seed=0).result()
        datum = next_token_datum(sentence)
        before = client.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
        client.optim_step(types.AdamParams(learning_rate=0.05)).result()
        for _ in range(2):
            client.forward_backward([datum], "cross_entropy")
            client.optim_step(types.AdamParams(learning_rate=0.05))
        after = client.forward([datum], "cross_entropy").result().metrics["loss:sum"]
        assert after < before
        sampler = client.save_weights_and_get_sampling_client()
        result = sampler.sample(
            types.ModelInput.from_ints(sentence[:5]), 2, types.SamplingParams(max_tokens=6, seed=1, stop=[])
        ).result()
        assert [len(s.tokens) for s in result.sequences] == [6, 6]
        # The sampler's logprobs are close to the trainer's (bf16 weights: not equal).
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(sentence)).result()[1:]
        trained = client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
        assert sum(abs(a - b) for a, b in zip(scored, trained, strict=True)) / len(scored) < 0.05
    finally:
        code = stop_server(running)
    assert code == 0, "".join(running.output)
