"""Two training clients and a sampler used at the same time do not interfere."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from tinker import types
from tiny_kit import next_token_datum

BASE = "Qwen/Qwen3-8B"


def train(
    service, seed: int, tokens: list[int], lr: float, steps: int = 4
) -> tuple[list[float], list[float]]:
    """Pipelined SFT steps (submit both, then wait), as loops do; returns losses and final logprobs."""
    client = service.create_lora_training_client(base_model=BASE, rank=4, seed=seed).result()
    datum = next_token_datum(tokens)
    losses = []
    for _ in range(steps):
        fb = client.forward_backward([datum], "cross_entropy")
        optim = client.optim_step(types.AdamParams(learning_rate=lr, eps=1e-8))
        losses.append(fb.result().metrics["loss:sum"])
        optim.result()
    final = client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    return losses, final


def sample(sampler, prompt_tokens: list[int], rounds: int = 4) -> list[list[int]]:
    params = types.SamplingParams(max_tokens=12, seed=42, stop=[])
    prompt = types.ModelInput.from_ints(prompt_tokens)
    return [list(sampler.sample(prompt, 2, params).result().sequences[0].tokens) for _ in range(rounds)]


def test_two_training_clients_and_a_sampler_concurrently(service, tokenizer, sentence):
    other = tokenizer.encode("Sunday Monday Tuesday Wednesday Thursday Friday Saturday")
    sampler = service.create_sampling_client(base_model=BASE).result()
    prompt = tokenizer.encode("The cat sat")

    alone_a = train(service, 21, sentence, 0.02)
    alone_b = train(service, 22, other, 0.05)
    alone_samples = sample(sampler, prompt)

    with ThreadPoolExecutor(max_workers=3) as pool:
        a = pool.submit(train, service, 21, sentence, 0.02)
        b = pool.submit(train, service, 22, other, 0.05)
        s = pool.submit(sample, sampler, prompt)
        together_a, together_b, together_samples = a.result(), b.result(), s.result()

    assert together_a[0] == pytest.approx(alone_a[0], rel=1e-6)
    assert together_a[1] == pytest.approx(alone_a[1], abs=1e-5)
    assert together_b[0] == pytest.approx(alone_b[0], rel=1e-6)
    assert together_b[1] == pytest.approx(alone_b[1], abs=1e-5)
    assert together_samples == alone_samples
    # The two clients really trained different things.
    assert alone_a[0] != pytest.approx(alone_b[0], rel=1e-3)
