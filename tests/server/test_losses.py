"""Every built-in loss, checked through the real SDK against values computed by plain torch."""

from __future__ import annotations

import math

import pytest
import torch
from tinker import types
from tiny_kit import next_token_datum, reference_logprobs, reference_model

BASE = "Qwen/Qwen3-8B"


def new_client(service, seed: int = 0, rank: int = 4):
    return service.create_lora_training_client(base_model=BASE, rank=rank, seed=seed).result()


def trained_client_and_adapter(service, server, sentence, name: str):
    """A client after one SFT step (so LoRA B != 0), and its adapter saved for plain torch."""
    client = new_client(service)
    client.forward_backward([next_token_datum(sentence)], "cross_entropy").result()
    client.optim_step(types.AdamParams(learning_rate=0.05)).result()
    path = client.save_weights_for_sampler(name).result().path
    run, kind, checkpoint = path.removeprefix("tinker://").split("/")
    return client, server.state_dir / run / kind / checkpoint


def test_cross_entropy_loss_sum_matches_plain_torch(service, server, sentence, tiny_dir):
    client, adapter_dir = trained_client_and_adapter(service, server, sentence, "ce-check")
    reference = reference_model(tiny_dir, adapter_dir)
    weights = [float(i % 3) * 0.5 for i in range(len(sentence) - 1)]
    result = client.forward([next_token_datum(sentence, weights)], "cross_entropy").result()

    expected_logprobs = reference_logprobs(reference, sentence[:-1], sentence[1:])
    expected_loss = -(torch.tensor(weights) * expected_logprobs).sum().item()
    assert result.metrics["loss:sum"] == pytest.approx(expected_loss, rel=1e-4, abs=1e-4)
    returned = result.loss_fn_outputs[0]["logprobs"].to_torch()
    assert torch.allclose(returned, expected_logprobs, atol=1e-4)
    # The adapter really moved the model away from the base: the check is not vacuous.
    base_logprobs = reference_logprobs(reference_model(tiny_dir), sentence[:-1], sentence[1:])
    assert not torch.allclose(base_logprobs, expected_logprobs, atol=1e-3)


def test_top_k_cross_entropy_matches_plain_torch(service, server, sentence, tiny_dir):
    client, adapter_dir = trained_client_and_adapter(service, server, sentence, "topk-check")
    reference = reference_model(tiny_dir, adapter_dir)
    n, k = len(sentence) - 1, 3
    generator = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 600, (n, k), generator=generator)
    weights = torch.rand((n, k), generator=generator)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(sentence[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_torch(targets),
            "weights": types.TensorData.from_torch(weights),
        },
    )
    result = client.forward_backward([datum], "cross_entropy").result()

    expected_logprobs = reference_logprobs(reference, sentence[:-1], targets)
    assert result.metrics["loss:sum"] == pytest.approx(-(weights * expected_logprobs).sum().item(), rel=1e-4)
    returned = result.loss_fn_outputs[0]["logprobs"]
    assert returned.shape == [n, k]
    assert torch.allclose(returned.to_torch(), expected_logprobs, atol=1e-4)


def sequence_logprob(client, tokens) -> float:
    out = client.forward([next_token_datum(tokens)], "cross_entropy").result()
    return float(out.loss_fn_outputs[0]["logprobs"].to_torch().sum())


def rl_datum(tokens, sampler_logprobs, advantage: float) -> types.Datum:
    n = len(tokens) - 1
    return next_token_datum(tokens, logprobs=list(sampler_logprobs), advantages=[advantage] * n)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_importance_sampling_moves_logprob_with_the_advantage(service, sentence, advantage):
    client = new_client(service)
    before = client.forward([next_token_datum(sentence)], "cross_entropy").result()
    sampler_logprobs = before.loss_fn_outputs[0]["logprobs"].to_torch().tolist()
    start = sum(sampler_logprobs)

    result = client.forward_backward([rl_datum(sentence, sampler_logprobs, advantage)], "importance_sampling")
    # At the sampler's own policy every ratio is 1: loss = -sum(advantages).
    assert result.result().metrics["loss:sum"] == pytest.approx(-advantage * (len(sentence) - 1), rel=1e-4)
    client.optim_step(types.AdamParams(learning_rate=0.01)).result()

    after = sequence_logprob(client, sentence)
    assert (after - start) * advantage > 0.1


def test_ppo_clipping_stops_the_update_beyond_the_threshold(service, sentence):
    client = new_client(service)
    current = client.forward([next_token_datum(sentence)], "cross_entropy").result()
    current_logprobs = current.loss_fn_outputs[0]["logprobs"].to_torch()
    # The sampler's logprobs are 1 nat lower: every ratio is e ~ 2.7, beyond clip_high 1.2.
    stale = (current_logprobs - 1.0).tolist()
    n = len(sentence) - 1

    clipped = client.forward_backward([rl_datum(sentence, stale, 1.0)], "ppo").result()
    assert clipped.metrics["loss:sum"] == pytest.approx(-1.2 * n, rel=1e-4)
    step = client.optim_step(types.AdamParams(learning_rate=0.01)).result()
    assert step.metrics["grad_norm:mean"] == 0.0
    assert sequence_logprob(client, sentence) == pytest.approx(float(current_logprobs.sum()), abs=1e-4)

    # Within the threshold (ratio 1) the same loss does move the model.
    unclipped = client.forward_backward(
        [rl_datum(sentence, current_logprobs.tolist(), 1.0)],
        "ppo",
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    ).result()
    assert unclipped.metrics["loss:sum"] == pytest.approx(-1.0 * n, rel=1e-4)
    assert client.optim_step(types.AdamParams(learning_rate=0.01)).result().metrics["grad_norm:mean"] > 0


def test_cispo_and_dro_losses_follow_their_formulas(service, sentence):
    client = new_client(service)
    current = client.forward([next_token_datum(sentence)], "cross_entropy").result()
    logprobs = current.loss_fn_outputs[0]["logprobs"].to_torch()
    n = len(sentence) - 1
    old = logprobs - torch.linspace(-0.5, 0.5, n)
    advantages = torch.linspace(-1, 1, n)
    datum = next_token_datum(sentence, logprobs=old.tolist(), advantages=advantages.tolist())

    cispo = client.forward([datum], "cispo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}).result()
    ratio = torch.exp(logprobs - old).clamp(0.9, 1.1)
    assert cispo.metrics["loss:sum"] == pytest.approx(-(ratio * advantages * logprobs).sum().item(), rel=1e-4)

    beta = 0.3
    dro = client.forward([datum], "dro", {"beta": beta}).result()
    expected = -(advantages * logprobs - 0.5 * beta * (logprobs - old) ** 2).sum().item()
    assert dro.metrics["loss:sum"] == pytest.approx(expected, rel=1e-4)


def test_forward_backward_custom_equals_the_builtin_loss(service, sentence):
    """The SDK linearises a custom loss into cross_entropy weights; the step must match CE."""
    builtin, custom = new_client(service, seed=3), new_client(service, seed=3)
    datum = next_token_datum(sentence, [1.0] * (len(sentence) - 1))

    def summed_nll(data, logprobs_list):
        loss = -sum(lp.sum() for lp in logprobs_list)
        return loss, {"nll:sum": float(loss.detach())}

    a = builtin.forward_backward([datum], "cross_entropy").result()
    b = custom.forward_backward_custom([datum], summed_nll).result()
    assert b.metrics["nll:sum"] == pytest.approx(a.metrics["loss:sum"], rel=1e-5)
    builtin.optim_step(types.AdamParams(learning_rate=0.01)).result()
    custom.optim_step(types.AdamParams(learning_rate=0.01)).result()
    assert sequence_logprob(builtin, sentence) == pytest.approx(sequence_logprob(custom, sentence), abs=1e-4)


def test_adam_params_are_all_applied(service, sentence):
    """Gradient clipping bounds the step; weight decay and betas change the result."""
    datum = next_token_datum(sentence)
    outcomes = {}
    for label, params in {
        "plain": types.AdamParams(learning_rate=0.01, eps=1e-8),
        "clipped": types.AdamParams(learning_rate=0.01, eps=1e-8, grad_clip_norm=1e-3),
        "decay": types.AdamParams(learning_rate=0.01, eps=1e-8, weight_decay=10.0),
        "betas": types.AdamParams(learning_rate=0.01, eps=1.0, beta1=0.5, beta2=0.5),
    }.items():
        client = new_client(service, seed=5)
        for _ in range(2):
            client.forward_backward([datum], "cross_entropy").result()
            metrics = client.optim_step(params).result().metrics
        assert math.isfinite(metrics["grad_norm:mean"]) and metrics["grad_norm:mean"] > 0
        outcomes[label] = sequence_logprob(client, sentence)
    assert len({round(v, 5) for v in outcomes.values()}) == 4, outcomes
