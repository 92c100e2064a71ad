"""Sampling through the SDK: logprobs, stop conditions, seeds, prompt logprobs, sources."""

from __future__ import annotations

import math

import pytest
import torch
from tinker import types
from tiny_kit import next_token_datum, reference_logprobs, reference_model

BASE = "Qwen/Qwen3-4B-Instruct-2507"


@pytest.fixture(scope="module")
def base_sampler(service):
    return service.create_sampling_client(base_model=BASE).result()


@pytest.fixture(scope="module")
def prompt(tokenizer) -> types.ModelInput:
    return types.ModelInput.from_ints(tokenizer.encode("Once upon a time there was"))


def test_sample_logprobs_match_compute_logprobs(base_sampler, prompt):
    result = base_sampler.sample(
        prompt, num_samples=3, sampling_params=types.SamplingParams(max_tokens=12, temperature=1.0, seed=11)
    ).result()
    assert len(result.sequences) == 3
    for sequence in result.sequences:
        assert len(sequence.tokens) == len(sequence.logprobs) > 0
        full = types.ModelInput.from_ints(prompt.to_ints() + list(sequence.tokens))
        scored = base_sampler.compute_logprobs(full).result()
        assert scored[0] is None
        tail = scored[prompt.length :]
        assert tail == pytest.approx(list(sequence.logprobs), abs=1e-4)


def test_prompt_logprobs_and_top_k_match_plain_torch(base_sampler, prompt, tiny_dir):
    tokens = prompt.to_ints()
    result = base_sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=1), include_prompt_logprobs=True, topk_prompt_logprobs=4
    ).result()
    model = reference_model(tiny_dir)
    expected = reference_logprobs(model, tokens[:-1], tokens[1:])
    assert result.prompt_logprobs[0] is None
    assert result.prompt_logprobs[1:] == pytest.approx(expected.tolist(), abs=1e-4)

    topk = result.topk_prompt_logprobs
    assert topk[0] is None and len(topk) == len(tokens)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens])).logits[0]
    best = torch.topk(torch.log_softmax(logits, -1), 4, dim=-1)
    for position in range(1, len(tokens)):
        ids = [token for token, _ in topk[position]]
        assert ids == best.indices[position - 1].tolist()
        assert [lp for _, lp in topk[position]] == pytest.approx(best.values[position - 1].tolist(), abs=1e-4)


def test_seed_makes_sampling_reproducible(base_sampler, prompt):
    def draw(seed):
        params = types.SamplingParams(max_tokens=16, seed=seed, temperature=1.0, stop=[])
        return [list(s.tokens) for s in base_sampler.sample(prompt, 2, params).result().sequences]

    first = draw(123)
    assert first == draw(123)
    assert first != draw(124)
    assert first[0] != first[1]  # the samples of one request differ from each other


def test_stop_token_ids_end_generation(base_sampler, prompt):
    free = base_sampler.sample(prompt, 1, types.SamplingParams(max_tokens=20, seed=5, stop=[])).result()
    tokens = list(free.sequences[0].tokens)
    assert free.sequences[0].stop_reason == "length" and len(tokens) == 20
    stop_id = tokens[4]
    first = tokens.index(stop_id)
    stopped = base_sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=20, seed=5, stop=[stop_id])
    ).result()
    assert list(stopped.sequences[0].tokens) == tokens[: first + 1]
    assert stopped.sequences[0].stop_reason == "stop"


def test_stop_strings_end_generation(base_sampler, prompt, tokenizer):
    free = base_sampler.sample(prompt, 1, types.SamplingParams(max_tokens=24, seed=8, stop=[])).result()
    text = tokenizer.decode(list(free.sequences[0].tokens))
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip(), text
    stopped = base_sampler.sample(prompt, 1, types.SamplingParams(max_tokens=24, seed=8, stop=stop)).result()
    sequence = stopped.sequences[0]
    out = tokenizer.decode(list(sequence.tokens))
    assert sequence.stop_reason == "stop"
    assert stop in out and stop not in tokenizer.decode(list(sequence.tokens)[:-1])
    assert len(sequence.tokens) < 24


def test_temperature_top_k_and_top_p(base_sampler, prompt):
    greedy = types.SamplingParams(max_tokens=8, temperature=0.0, stop=[])
    a = base_sampler.sample(prompt, 2, greedy).result().sequences
    assert list(a[0].tokens) == list(a[1].tokens)
    top1 = types.SamplingParams(max_tokens=8, temperature=1.0, top_k=1, seed=1, stop=[])
    assert list(base_sampler.sample(prompt, 1, top1).result().sequences[0].tokens) == list(a[0].tokens)
    nucleus = types.SamplingParams(max_tokens=8, temperature=1.0, top_p=1e-6, seed=2, stop=[])
    assert list(base_sampler.sample(prompt, 1, nucleus).result().sequences[0].tokens) == list(a[0].tokens)
    # At temperature T the logprob is under softmax(logits / T): greedy tokens get a higher one.
    cold = base_sampler.sample(
        prompt, 1, types.SamplingParams(max_tokens=8, temperature=0.5, top_k=1, stop=[])
    )
    cold_logprobs = cold.result().sequences[0].logprobs
    assert all(c >= w - 1e-5 for c, w in zip(cold_logprobs, a[0].logprobs, strict=True))
    assert all(math.isfinite(v) for v in cold_logprobs)


def test_samplers_from_training_weights_and_saved_paths(service, prompt, sentence):
    client = service.create_lora_training_client(base_model=BASE, rank=4, seed=0).result()
    for _ in range(3):
        client.forward_backward([next_token_datum(sentence)], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=0.05))
    current = client.save_weights_and_get_sampling_client().result()
    path = client.save_weights_for_sampler("sampler-path").result().path
    from_path = service.create_sampling_client(model_path=path).result()
    base = service.create_sampling_client(base_model=BASE).result()

    assert from_path.get_tokenizer().encode("hello") == client.get_tokenizer().encode("hello")
    full = types.ModelInput.from_ints(sentence)
    trained = current.compute_logprobs(full).result()[1:]
    assert from_path.compute_logprobs(full).result()[1:] == pytest.approx(trained, abs=1e-5)
    assert sum(trained) > sum(base.compute_logprobs(full).result()[1:]) + 1.0
    trained_expected = client.forward([next_token_datum(sentence)], "cross_entropy").result()
    assert trained == pytest.approx(trained_expected.loss_fn_outputs[0]["logprobs"].tolist(), abs=1e-4)
    # The ephemeral sampler is a snapshot: training further does not change it.
    client.forward_backward([next_token_datum(sentence)], "cross_entropy")
    client.optim_step(types.AdamParams(learning_rate=0.05)).result()
    assert current.compute_logprobs(full).result()[1:] == pytest.approx(trained, abs=1e-6)


def test_prompt_logprobs_last_n_scores_only_the_suffix(base_sampler, sentence):
    full = types.ModelInput.from_ints(sentence)
    everything = base_sampler.compute_logprobs(full).result()
    suffix = base_sampler.compute_logprobs(full, prompt_logprobs_last_n=3).result()
    assert suffix[:-3] == [None] * (len(sentence) - 3)
    assert suffix[-3:] == pytest.approx(everything[-3:], abs=1e-5)
