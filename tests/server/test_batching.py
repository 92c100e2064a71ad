"""Cross-request batching in the engine: one decode batch for requests that arrive together,
the same tokens for a seed whether a request ran alone or batched, bounded slices, cancel(owner).

These run the server's Scheduler and Engine in-process on the tiny model (no HTTP), except the
last test, which checks the same property through the SDK and ``rtc serve``.
"""

from __future__ import annotations

import threading
import time

import pytest
from tinker import types

from rtc.server.engine import Engine
from rtc.server.sampling import SamplingRequest, generate_many
from rtc.server.scheduler import Scheduler, WorkCancelled

BASE = "Qwen/Qwen3-4B-Instruct-2507"
PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog. What is 2 + 2? The answer is",
    "Hi",
    "def add(a, b):\n    return",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15",
]


@pytest.fixture(scope="module")
def engine(tiny_dir):
    return Engine(tiny_dir, threads=1)


@pytest.fixture
def scheduler(engine):
    running = Scheduler(engine)
    yield running
    running.close()


def request(tokenizer, text, n=2, seed=0, max_tokens=12, **overrides) -> SamplingRequest:
    fields = dict(
        prompt=tokenizer.encode(text),
        num_samples=n,
        max_tokens=max_tokens,
        temperature=1.0,
        top_k=-1,
        top_p=1.0,
        seed=seed,
        stop_strings=[],
        stop_token_ids=[],
        prompt_logprobs=False,
        topk_prompt_logprobs=0,
    )
    fields.update(overrides)
    return SamplingRequest(**fields)


def mixed_requests(tokenizer) -> list[SamplingRequest]:
    """Different prompts, lengths, sample counts, temperatures, filters and stops."""
    stop_id = tokenizer.encode(" the")[0]
    return [
        request(tokenizer, PROMPTS[0], n=3, seed=1, max_tokens=14),
        request(tokenizer, PROMPTS[1], n=2, seed=2, max_tokens=9, stop_token_ids=[stop_id]),
        request(tokenizer, PROMPTS[2], n=4, seed=3, max_tokens=5, temperature=0.7, top_k=8),
        request(tokenizer, PROMPTS[3], n=1, seed=4, max_tokens=16, temperature=0.0),
        request(tokenizer, PROMPTS[4], n=2, seed=5, max_tokens=11, top_p=0.8, stop_strings=["1"]),
    ]


def tokens_of(result) -> list[list[int]]:
    return [list(s.tokens) for s in result.sequences]


class Gate:
    """A job that holds the engine thread until released, so requests queue up behind it."""

    def __init__(self, scheduler: Scheduler):
        self.release = threading.Event()
        self.started = threading.Event()
        self.future = scheduler.submit(self._hold)

    def _hold(self) -> None:
        self.started.set()
        self.release.wait(30)

    def __enter__(self) -> Gate:
        assert self.started.wait(30)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.future.result(30)


def test_requests_that_arrive_together_decode_as_one_batch(engine, scheduler, tokenizer):
    """Four 2-sample requests queued together decode in about max_tokens steps of 8 rows,
    where one request after another would take four times as many steps of 2 rows."""
    reqs = [request(tokenizer, text, n=2, seed=i, max_tokens=10) for i, text in enumerate(PROMPTS[:4])]
    with Gate(scheduler):
        futures = [scheduler.sample(r, None) for r in reqs]
    results = [f.result(60) for f in futures]
    assert all(len(s.tokens) == 10 for r in results for s in r.sequences)
    assert scheduler.stats["max_rows"] == 8
    assert scheduler.stats["decode_steps"] <= 10


def test_same_seed_same_tokens_alone_or_batched_with_joins(engine, scheduler, tokenizer):
    """Each request run alone, then all of them together with later ones joining a batch
    that is already decoding (so rows of different lengths share the cache and finished rows
    leave): the tokens are the same, the logprobs equal up to float rounding."""
    reqs = mixed_requests(tokenizer)
    alone = [scheduler.sample(r, None).result(60) for r in reqs]

    # Batched: the first two start together; the others join one by one while they decode.
    with Gate(scheduler):
        futures = [scheduler.sample(r, None) for r in reqs[:2]]
    steps = scheduler.stats["decode_steps"]
    for r in reqs[2:]:
        deadline = time.monotonic() + 30
        while scheduler.stats["decode_steps"] < steps + 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        steps = scheduler.stats["decode_steps"]
        futures.append(scheduler.sample(r, None))
    batched = [f.result(60) for f in futures]

    for a, b, r in zip(alone, batched, reqs, strict=True):
        assert tokens_of(a) == tokens_of(b), r
        for sa, sb in zip(a.sequences, b.sequences, strict=True):
            assert sb.logprobs == pytest.approx(sa.logprobs, abs=1e-4)
            assert sa.stop_reason == sb.stop_reason
    assert scheduler.stats["max_rows"] > 4  # rows of several requests were decoded together
    # The stops of each request applied to its own rows only.
    stop_id = reqs[1].stop_token_ids[0]
    assert all(
        s.stop_reason == "stop" and s.tokens[-1] == stop_id for s in batched[1].sequences if len(s.tokens) < 9
    )


def test_the_models_own_cache_path_gives_the_same_tokens(engine, tokenizer):
    """Models whose cache RowCache cannot hold decode each request alone: same results."""
    reqs = mixed_requests(tokenizer)
    model = engine.sampling_weights(None)()
    batched = generate_many(model, engine.tokenizer, reqs, engine.max_length, own_cache=False)
    own = generate_many(model, engine.tokenizer, reqs, engine.max_length, own_cache=True)
    assert [tokens_of(r) for r in batched] == [tokens_of(r) for r in own]


def test_a_long_request_does_not_starve_a_short_one_or_a_job(engine, scheduler, tokenizer):
    """A 600-token request is decoded in slices: a short request and a training-sized job
    that arrive after it finish while it is still running."""
    long = scheduler.sample(request(tokenizer, PROMPTS[0], n=1, max_tokens=600), None)
    short = scheduler.sample(request(tokenizer, PROMPTS[1], n=1, max_tokens=3), None)
    job = scheduler.submit(lambda: long.done())
    assert short.result(60).sequences[0].tokens
    assert job.result(60) is False  # the job ran while the long request was still decoding
    assert not long.done()
    assert len(long.result(120).sequences[0].tokens) == 600


def test_cancel_drops_an_owners_queued_and_running_work(engine, scheduler, tokenizer):
    reqs = mixed_requests(tokenizer)
    with Gate(scheduler):
        queued_job = scheduler.submit(lambda: "ran", owner="gone")
        queued_sample = scheduler.sample(reqs[0], None, owner="gone")
        other = scheduler.sample(reqs[1], None, owner="stays")
        assert scheduler.cancel("gone") == 2
    with pytest.raises(WorkCancelled):
        queued_job.result(30)
    with pytest.raises(WorkCancelled):
        queued_sample.result(30)
    assert other.result(60).sequences

    # A request that is already decoding is dropped at its next step.
    running = scheduler.sample(request(tokenizer, PROMPTS[0], n=2, max_tokens=2000), None, owner="gone")
    deadline = time.monotonic() + 30
    while scheduler.stats["decode_steps"] < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert scheduler.cancel("gone") == 1
    with pytest.raises(WorkCancelled):
        running.result(30)
    deadline = time.monotonic() + 30
    while not scheduler.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scheduler.idle()
    assert scheduler.stats["decode_steps"] < 2000


def test_a_waiter_that_gives_up_frees_its_rows(engine, scheduler, tokenizer):
    running = scheduler.sample(request(tokenizer, PROMPTS[0], n=1, max_tokens=2000), None)
    running.cancel()
    deadline = time.monotonic() + 30
    while not scheduler.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scheduler.idle() and scheduler.stats["decode_steps"] < 2000


def test_close_fails_pending_work(engine, tokenizer):
    scheduler = Scheduler(engine)
    gate = Gate(scheduler)
    gate.started.wait(30)
    pending = scheduler.sample(request(tokenizer, PROMPTS[0], max_tokens=2000), None)
    job = scheduler.submit(lambda: None)
    gate.release.set()
    scheduler.close()
    with pytest.raises(WorkCancelled):
        pending.result(30)
    with pytest.raises(WorkCancelled):
        job.result(30)
    with pytest.raises(WorkCancelled):
        scheduler.submit(lambda: None).result(1)


def test_gathered_sdk_requests_give_the_tokens_of_sequential_ones(service, tokenizer):
    """Through rtc serve: a GRPO-style step (several prompts issued at once) samples exactly
    what the same requests give one at a time."""
    sampler = service.create_sampling_client(base_model=BASE).result()
    prompts = [types.ModelInput.from_ints(tokenizer.encode(text)) for text in PROMPTS[:4]]
    params = [types.SamplingParams(max_tokens=10, temperature=1.0, seed=100 + i, stop=[]) for i in range(4)]
    one_by_one = [sampler.sample(p, 3, sp).result() for p, sp in zip(prompts, params, strict=True)]
    pending = [sampler.sample(p, 3, sp) for p, sp in zip(prompts, params, strict=True)]
    together = [f.result() for f in pending]
    for a, b in zip(one_by_one, together, strict=True):
        assert tokens_of(a) == tokens_of(b)
        for sa, sb in zip(a.sequences, b.sequences, strict=True):
            assert list(sb.logprobs) == pytest.approx(list(sa.logprobs), abs=1e-4)


@pytest.fixture(scope="module")
def large_vocab_engine(tiny_dir, tmp_path_factory):
    """A one-layer random Llama with a 150k vocabulary (the family models' size) and the tiny
    tokenizer (sampled ids beyond it are never decoded: these requests use stop ids only).

    Its weights are scaled up so that next-token distributions are peaked as a trained model's
    are: batched matmuls round differently from a lone request's in the last bits, which can
    flip a draw that lands within about 1e-6 of a boundary between two tokens; over a
    near-uniform 150k-token distribution such boundaries are everywhere (see sampling.py)."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("large-vocab")
    config = LlamaConfig(
        vocab_size=150_000,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=[3, 4],
        initializer_range=1.0,  # peaked next-token distributions, like a trained model's
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(directory)
    for path in tiny_dir.iterdir():
        if "token" in path.name or path.name.endswith(".jinja"):
            shutil.copy(path, directory / path.name)
    return Engine(directory, threads=1)


def test_a_large_vocabulary_with_several_stop_ids(large_vocab_engine, tokenizer):
    engine = large_vocab_engine
    scheduler = Scheduler(engine)
    try:
        stops = list(range(100, 2100))  # 2000 stop ids: a row stops early now and then
        reqs = [
            request(tokenizer, text, n=3, seed=i, max_tokens=20, stop_token_ids=stops, temperature=1.0)
            for i, text in enumerate(PROMPTS)
        ]
        scored = request(
            tokenizer, PROMPTS[1], n=1, max_tokens=1, prompt_logprobs=True, topk_prompt_logprobs=2
        )
        alone = [scheduler.sample(r, None).result(60) for r in [*reqs, scored]]
        with Gate(scheduler):
            futures = [scheduler.sample(r, None) for r in [*reqs, scored]]
        together = [f.result(60) for f in futures]
    finally:
        scheduler.close()
    assert [tokens_of(r) for r in alone] == [tokens_of(r) for r in together]
    sequences = [s for r in together[:-1] for s in r.sequences]
    assert any(s.stop_reason == "stop" and s.tokens[-1] in stops for s in sequences)
    assert any(max(s.tokens) >= 100_000 for s in sequences)  # ids far past any small vocabulary
    # Prompt logprobs in chunks (the vocabulary makes them small) equal one full forward.
    prompt = scored.prompt
    model = engine.sampling_weights(None)()
    import torch

    with torch.no_grad():
        full = torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0].float(), -1)
    expected = full[:-1].gather(1, torch.tensor(prompt[1:])[:, None])[:, 0].tolist()
    assert together[-1].prompt_logprobs[1:] == pytest.approx(expected, abs=1e-4)
