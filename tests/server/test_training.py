"""Training through the SDK: SFT converges, and checkpoints resume exactly."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from tinker import types
from tiny_kit import next_token_datum

BASE = "meta-llama/Llama-3.2-1B"
ADAM = types.AdamParams(learning_rate=0.02, beta1=0.9, beta2=0.95, eps=1e-8)


def sft_pair(tokenizer) -> types.Datum:
    """A chat prompt and its answer; only the answer tokens carry weight."""
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True, tokenize=False
    )
    prompt_tokens = tokenizer.encode(prompt)
    answer_tokens = tokenizer.encode("The answer is 4.<|im_end|>")
    tokens = prompt_tokens + answer_tokens
    weights = [0.0] * (len(prompt_tokens) - 1) + [1.0] * len(answer_tokens)
    return next_token_datum(tokens, weights)


def step(client, datum) -> float:
    fb = client.forward_backward([datum], "cross_entropy")
    optim = client.optim_step(ADAM)
    loss = fb.result().metrics["loss:sum"]
    optim.result()
    return loss


def adapter_weights(server, path: str) -> dict[str, torch.Tensor]:
    run, kind, name = path.removeprefix("tinker://").split("/")
    return load_file(str(server.state_dir / run / kind / name / "adapter_model.safetensors"))


def test_twenty_sft_steps_halve_the_loss(service, tokenizer):
    client = service.create_lora_training_client(base_model=BASE, rank=8, seed=1).result()
    datum = sft_pair(tokenizer)
    losses = [step(client, datum) for _ in range(20)]
    final = client.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert final <= 0.5 * losses[0], losses


def test_get_tokenizer_loads_the_local_tokenizer_offline(service, tokenizer):
    client = service.create_lora_training_client(base_model="Qwen/Qwen3-30B-A3B", rank=2).result()
    loaded = client.get_tokenizer()
    assert loaded.encode("hello world") == tokenizer.encode("hello world")
    assert loaded.eos_token == "<|im_end|>"


def test_resume_with_optimizer_equals_an_uninterrupted_run(service, server, tokenizer):
    datum = sft_pair(tokenizer)
    uninterrupted = service.create_lora_training_client(base_model=BASE, rank=4, seed=7).result()
    interrupted = service.create_lora_training_client(base_model=BASE, rank=4, seed=7).result()
    for _ in range(3):
        step(uninterrupted, datum)
        step(interrupted, datum)
    saved = interrupted.save_state("step-3").result().path
    assert saved.startswith("tinker://") and saved.endswith("/weights/step-3")

    resumed = service.create_training_client_from_state_with_optimizer(saved).result()
    assert step(resumed, datum) == pytest.approx(step(uninterrupted, datum), rel=1e-6)
    a = adapter_weights(server, resumed.save_weights_for_sampler("resumed-4").result().path)
    b = adapter_weights(server, uninterrupted.save_weights_for_sampler("straight-4").result().path)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key

    # Without the optimizer the weights are restored but Adam starts over, so the next step differs.
    fresh = service.create_training_client_from_state(saved).result()
    fresh_step_loss = step(fresh, datum)
    assert fresh_step_loss == pytest.approx(
        step(service.create_training_client_from_state(saved).result(), datum)
    )
    c = adapter_weights(server, fresh.save_weights_for_sampler("fresh-4").result().path)
    assert any(not torch.allclose(c[key], a[key], atol=1e-5) for key in a)
    # A fresh Adam's first step moves every trained weight by about the learning rate.
    before = adapter_weights(server, interrupted.save_weights_for_sampler("at-3").result().path)
    moved = torch.cat([(c[key] - before[key]).abs().flatten() for key in c if "lora_B" in key])
    assert moved.max().item() == pytest.approx(ADAM.learning_rate, rel=0.05)


def test_load_state_into_an_existing_client(service, tokenizer):
    datum = sft_pair(tokenizer)
    source = service.create_lora_training_client(base_model=BASE, rank=4, seed=2).result()
    step(source, datum)
    path = source.save_state("for-load").result().path
    target = service.create_lora_training_client(base_model=BASE, rank=4, seed=9).result()
    with pytest.warns(FutureWarning):
        target.load_state(path).result()
    loss_source = source.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    loss_target = target.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert loss_target == pytest.approx(loss_source, rel=1e-6)


def test_a_request_larger_than_a_micro_batch_gives_the_same_step(service):
    """5120 tokens run as two micro-batches on the server; the step equals two smaller requests."""
    from rtc.server.engine import MICRO_BATCH_TOKENS

    generator = torch.Generator().manual_seed(3)
    rows = [torch.randint(3, 600, (129,), generator=generator).tolist() for _ in range(40)]
    data = [next_token_datum(row) for row in rows]
    assert sum(len(row) - 1 for row in rows) > MICRO_BATCH_TOKENS

    whole = service.create_lora_training_client(base_model=BASE, rank=4, seed=4).result()
    halves = service.create_lora_training_client(base_model=BASE, rank=4, seed=4).result()
    loss_whole = whole.forward_backward(data, "cross_entropy").result().metrics["loss:sum"]
    loss_halves = sum(
        halves.forward_backward(part, "cross_entropy").result().metrics["loss:sum"]
        for part in (data[:20], data[20:])
    )
    assert loss_whole == pytest.approx(loss_halves, rel=1e-5)
    whole.optim_step(ADAM).result()
    halves.optim_step(ADAM).result()
    probe = [data[0]]
    after_whole = whole.forward(probe, "cross_entropy").result().metrics["loss:sum"]
    assert after_whole == pytest.approx(
        halves.forward(probe, "cross_entropy").result().metrics["loss:sum"], rel=1e-5
    )
