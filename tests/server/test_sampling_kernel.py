"""The sampling kernel draws from the distribution it is given (statistical tests, fixed seeds).

Inverse-CDF sampling replaced ``torch.multinomial``; these tests check the distribution, not the
speed (speed is in benchmarks/). Each compares observed counts with the exact probabilities by
a chi-square test at a fixed seed, so the tests are deterministic; an off-by-one in the search,
a wrong temperature, or a filter applied to the wrong rows moves the counts far outside it.
"""

from __future__ import annotations

import pytest
import scipy.stats as scipy_stats
import torch

from rtc.server.engine import Engine
from rtc.server.sampling import SamplingRequest, filter_logits, generate, inverse_cdf


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of observed ``counts`` under ``probs``, pooling categories expected below 5."""
    total = int(counts.sum())
    expected = probs.double() * total
    order = torch.argsort(expected, descending=True)
    observed, wanted = [], []
    pool_o, pool_e = 0.0, 0.0
    for index in order.tolist():
        if expected[index] >= 5:
            observed.append(float(counts[index]))
            wanted.append(float(expected[index]))
        else:
            pool_o += float(counts[index])
            pool_e += float(expected[index])
    if pool_e > 0:
        observed.append(pool_o)
        wanted.append(pool_e)
    scale = sum(observed) / sum(wanted)
    return float(scipy_stats.chisquare(observed, [w * scale for w in wanted]).pvalue)


def test_inverse_cdf_matches_the_probabilities_and_never_draws_a_zero():
    generator = torch.Generator().manual_seed(0)
    probs = torch.rand(1, 40, generator=generator) ** 3
    probs[0, [0, 7, 8, 39]] = 0.0  # zeros at both ends and in the middle
    draws = 200_000
    uniforms = torch.rand(draws, generator=generator)
    chosen = inverse_cdf(probs.expand(draws, -1), uniforms)
    counts = torch.bincount(chosen, minlength=40)
    assert counts[[0, 7, 8, 39]].sum() == 0
    assert chi_square_p(counts, probs[0] / probs.sum()) > 1e-3
    # The two ends of [0, 1): the first and the last token of positive mass.
    edges = inverse_cdf(
        probs.expand(2, -1), torch.tensor([0.0, torch.nextafter(torch.tensor(1.0), torch.tensor(0.0))])
    )
    assert edges.tolist() == [1, 38]


def test_inverse_cdf_takes_unnormalised_rows_independently():
    probs = torch.tensor([[0.0, 2.0, 2.0], [5.0, 0.0, 0.0], [1e-30, 0.0, 3.0]])
    uniforms = torch.tensor([0.49, 0.99, 0.5])
    assert inverse_cdf(probs, uniforms).tolist() == [1, 0, 2]


@pytest.fixture(scope="module")
def engine(tiny_dir):
    return Engine(tiny_dir, threads=1)


def first_token_counts(engine, temperature, top_k, top_p, samples=6000, seed=0):
    prompt = engine.tokenizer.hf.encode("Once upon a time there was")  # the tiny model is a HF one
    request = SamplingRequest(
        prompt=prompt,
        num_samples=samples,
        max_tokens=1,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        stop_strings=[],
        stop_token_ids=[],
        prompt_logprobs=False,
        topk_prompt_logprobs=0,
    )
    model = engine.sampling_weights(None)()
    result = generate(model, engine.tokenizer, request, engine.max_length)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    chosen = torch.tensor([s.tokens[0] for s in result.sequences])
    logprobs = torch.tensor([s.logprobs[0] for s in result.sequences])
    return torch.bincount(chosen, minlength=logits.shape[0]), chosen, logprobs, logits


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, -1, 1.0), (0.6, -1, 1.0), (1.3, 12, 1.0), (0.8, -1, 0.7)],
)
def test_sampled_tokens_follow_the_tempered_filtered_distribution(engine, temperature, top_k, top_p):
    counts, chosen, logprobs, logits = first_token_counts(engine, temperature, top_k, top_p)
    scaled = torch.log_softmax(logits / temperature, dim=-1)
    probs = torch.softmax(filter_logits(scaled[None], top_k, top_p)[0], dim=-1)
    assert counts[probs == 0].sum() == 0  # nothing outside top-k / the nucleus
    assert chi_square_p(counts, probs) > 1e-3
    # Each token's logprob is its logprob at the temperature, before truncation.
    assert logprobs.tolist() == pytest.approx(scaled[chosen].tolist(), abs=1e-5)


def test_a_wrong_temperature_is_detected(engine):
    """The test above has power: samples at temperature 1 fail against the 0.6 distribution."""
    counts, _, _, logits = first_token_counts(engine, 1.0, -1, 1.0)
    wrong = torch.softmax(logits / 0.6, dim=-1)
    assert chi_square_p(counts, wrong) < 1e-6
