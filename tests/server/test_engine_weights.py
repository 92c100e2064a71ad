"""Sampler weights merged at save time, their memory budget, the compute dtype, micro-batches.

In-process on the tiny model. The reference for a merged sampler is the peft path (the frozen
adapter run through peft's LoRA branches), which is what sampled before merging existed.
"""

from __future__ import annotations

import pytest
import torch

from rtc.server.engine import AdamParams, Datum, Engine, LoraSettings, micro_batches
from rtc.server.losses import check_loss
from rtc.server.sampling import SamplingRequest, generate

TEXT = "The quick brown fox jumps over the lazy dog. What is 2 + 2? The answer is 4."


def train(engine: Engine, name: str, tokens: list[int], steps: int = 3, rank: int = 4) -> None:
    engine.create_training_adapter(name, LoraSettings(rank, 0, True, True, True))
    datum = Datum(
        tokens=tokens[:-1],
        inputs={"target_tokens": torch.tensor(tokens[1:]), "weights": torch.ones(len(tokens) - 1)},
    )
    for _ in range(steps):
        engine.forward_backward(name, [datum], check_loss("cross_entropy", {}), forward_only=False)
        engine.optim_step(name, AdamParams(learning_rate=0.05))


def prompt_logprobs(engine: Engine, model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    request = SamplingRequest(
        prompt=tokens,
        num_samples=1,
        max_tokens=1,
        temperature=1.0,
        top_k=-1,
        top_p=1.0,
        seed=0,
        stop_strings=[],
        stop_token_ids=[],
        prompt_logprobs=True,
        topk_prompt_logprobs=0,
    )
    return torch.tensor(generate(model, engine.tokenizer, request, engine.max_length).prompt_logprobs[1:])


def peft_logprobs(engine: Engine, adapter: str, tokens: list[int]) -> torch.Tensor:
    with engine.use(adapter) as model:
        return prompt_logprobs(engine, model, tokens)


@pytest.fixture
def engine(tiny_dir):
    return Engine(tiny_dir, threads=1)


def test_a_snapshot_is_merged_and_equals_the_peft_path(engine, tokenizer):
    tokens = tokenizer.encode(TEXT)
    train(engine, "t1", tokens)
    engine.snapshot_for_sampling("t1", "snap")
    model = engine.sampling_weights("snap")()
    assert model is not engine._peft and "snap" in engine._merged  # the merged copy samples
    merged = prompt_logprobs(engine, model, tokens)
    reference = peft_logprobs(engine, "snap", tokens)
    base = prompt_logprobs(engine, engine.sampling_weights(None)(), tokens)
    assert (reference - base).abs().max() > 0.1  # training moved the weights
    assert (merged - reference).abs().max() < 2e-5  # fp32 rounding only

    # Frozen: training further changes the training adapter, not the sampler.
    train_more = Datum(tokens=tokens[:-1], inputs={"target_tokens": torch.tensor(tokens[1:])})
    engine.forward_backward("t1", [train_more], check_loss("cross_entropy", {}), forward_only=False)
    engine.optim_step("t1", AdamParams(learning_rate=0.05))
    assert torch.equal(prompt_logprobs(engine, engine.sampling_weights("snap")(), tokens), merged)


def test_merged_copies_share_the_unadapted_tensors(engine, tokenizer):
    train(engine, "t1", tokenizer.encode(TEXT), steps=1)
    engine.snapshot_for_sampling("t1", "snap")
    merged = engine.sampling_weights("snap")()
    plain = engine.sampling_weights(None)()
    embed = merged.get_input_embeddings().weight
    assert embed.data_ptr() == plain.get_input_embeddings().weight.data_ptr()
    adapted = dict(merged.named_parameters())["model.layers.0.self_attn.q_proj.weight"]
    assert (
        adapted.data_ptr()
        != dict(plain.named_parameters())["model.layers.0.self_attn.q_proj.weight"].data_ptr()
    )
    # The base tree itself is never changed by merging.
    assert plain.get_output_embeddings().weight.data_ptr() != merged.get_output_embeddings().weight.data_ptr()


def test_beyond_the_budget_copies_are_dropped_and_made_again(engine, tokenizer):
    tokens = tokenizer.encode(TEXT)
    train(engine, "t1", tokens)
    engine.snapshot_for_sampling("t1", "first")
    engine.merged_budget_bytes = engine.merged_bytes("first")  # room for exactly one copy
    train(engine, "t2", tokens[::-1])
    engine.snapshot_for_sampling("t2", "second")
    assert list(engine._merged) == ["second"]
    again = prompt_logprobs(engine, engine.sampling_weights("first")(), tokens)  # merged again
    assert list(engine._merged) == ["first"]
    assert (again - peft_logprobs(engine, "first", tokens)).abs().max() < 2e-5


def test_a_model_larger_than_the_budget_samples_through_peft(engine, tokenizer):
    tokens = tokenizer.encode(TEXT)
    train(engine, "t1", tokens)
    engine.merged_budget_bytes = 0
    engine.snapshot_for_sampling("t1", "snap")
    assert not engine._merged
    opened = engine.sampling_weights("snap")
    assert opened() is engine._peft
    via_peft = prompt_logprobs(engine, opened(), tokens)
    # Training work selects its own adapter; opening the sampler again selects the sampler's.
    engine.forward_backward(
        "t1",
        [Datum(tokens=tokens[:-1], inputs={"target_tokens": torch.tensor(tokens[1:])})],
        check_loss("cross_entropy", {}),
        forward_only=True,
    )
    assert torch.equal(prompt_logprobs(engine, opened(), tokens), via_peft)
    engine.delete_adapter("snap")
    with pytest.raises(ValueError, match="gone"):
        opened()


def test_deleting_a_sampler_frees_its_merged_copy(engine, tokenizer):
    train(engine, "t1", tokenizer.encode(TEXT), steps=1)
    engine.snapshot_for_sampling("t1", "snap")
    engine.delete_adapter("snap")
    assert "snap" not in engine._merged
    with pytest.raises(ValueError, match="gone"):
        engine.sampling_weights("snap")


def test_bfloat16_keeps_lora_and_logits_in_float32(tiny_dir, tokenizer):
    engine = Engine(tiny_dir, threads=1, dtype="bfloat16")
    reference = Engine(tiny_dir, threads=1)
    tokens = tokenizer.encode(TEXT)
    assert engine.base.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert engine.base.get_output_embeddings().weight.dtype == torch.float32
    train(engine, "t1", tokens)
    assert all(p.dtype == torch.float32 for p in engine._adapters["t1"].params)
    engine.snapshot_for_sampling("t1", "snap")
    merged = prompt_logprobs(engine, engine.sampling_weights("snap")(), tokens)
    # Sampler (merged into bf16 weights) and trainer (bf16 base + fp32 LoRA) agree to bf16
    # precision only: rounding W + BA to bf16 loses part of a small update (see benchmarks/).
    assert (merged - peft_logprobs(engine, "snap", tokens)).abs().mean() < 0.05
    base16 = prompt_logprobs(engine, engine.sampling_weights(None)(), tokens)
    base32 = prompt_logprobs(reference, reference.sampling_weights(None)(), tokens)
    assert (base16 - base32).abs().mean() < 0.05
    assert torch.isfinite(merged).all()


def test_an_unknown_dtype_is_refused(tiny_dir):
    with pytest.raises(ValueError, match="dtype"):
        Engine(tiny_dir, threads=1, dtype="float8")


def test_micro_batches_bound_padded_tokens_and_group_similar_lengths():
    lengths = [3, 3, 5, 1, 9, 2, 4]
    groups = micro_batches(lengths, 8)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert len(group) * longest <= 8 or len(group) == 1
    assert [[lengths[i] for i in g] for g in groups] == [[9], [5], [4, 3], [3, 2], [1]]


def test_target_logprobs_gradient_matches_autograd():
    from rtc.server.engine import _TargetLogprobs

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, dtype=torch.double, generator=generator, requires_grad=True)
    index = torch.randint(0, 11, (2, 5, 3), generator=generator)
    torch.autograd.gradcheck(_TargetLogprobs.apply, (logits, index))
    expected = logits.gather(-1, index) - torch.logsumexp(logits, -1, keepdim=True)
    assert torch.allclose(_TargetLogprobs.apply(logits, index), expected)


def test_training_step_equals_pefts_own_forward_on_unpadded_datums(engine, tokenizer):
    """The engine's fast path (fused LoRA forward, padded batch without an attention mask,
    one-pass target logprobs) gives the gradient of peft's vanilla forward, datum by datum."""
    texts = [TEXT, "Once upon a time", "def add(a, b):\n    return a + b", "Hi"]
    data = []
    for i, text in enumerate(texts):
        tokens = tokenizer.encode(text)
        weights = torch.linspace(0.5, 1.5, len(tokens) - 1)
        if i == 2:  # a top-K distillation target [N, 2]
            targets = torch.stack([torch.tensor(tokens[1:]), torch.tensor(tokens[1:][::-1])], dim=1)
            data.append(
                Datum(
                    tokens=tokens[:-1],
                    inputs={"target_tokens": targets, "weights": weights[:, None].expand(-1, 2)},
                )
            )
        else:
            data.append(
                Datum(
                    tokens=tokens[:-1], inputs={"target_tokens": torch.tensor(tokens[1:]), "weights": weights}
                )
            )
    engine.create_training_adapter("t1", LoraSettings(4, 0, True, True, True))
    params = engine._adapters["t1"].params
    with torch.no_grad():
        for p in params:
            p.normal_(0, 0.05)
    spec = check_loss("cross_entropy", {})
    fast = engine.forward_backward("t1", data, spec, forward_only=False)
    fast_grads = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None

    for module in engine.base.modules():  # back to peft's own LoRA forward
        getattr(module, "lora_variant", {}).pop("t1", None)
    reference_loss = 0.0
    with engine.use("t1") as model:
        for datum in data:
            logits = model(input_ids=torch.tensor([datum.tokens])).logits[0].float()
            targets = datum.inputs["target_tokens"].reshape(len(datum.tokens), -1)
            logprobs = (
                torch.log_softmax(logits, -1).gather(1, targets).reshape(datum.inputs["target_tokens"].shape)
            )
            loss = -(datum.inputs["weights"] * logprobs).sum()
            loss.backward()
            reference_loss += float(loss)
    assert fast.loss_sum == pytest.approx(reference_loss, rel=1e-5)
    for got, want in zip(fast_grads, (p.grad for p in params), strict=True):
        assert float((got - want).norm() / want.norm()) < 1e-5
