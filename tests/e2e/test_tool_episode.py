"""A whole tool-agents episode through `rtc serve` and the real SDK, with nothing left to luck.

A scripted policy stands in for what the sampler would draw (a search call, then an answer; or a
malformed call, then a wrong answer), and everything else is the generated loop's own code against a
real server: the tools declared in the family's format, the search over the example corpus, the tool
result rendered into the next prompt, the verdict on the final answer, the datums of the whole
transcript and a training step. The scripted tokens carry the served model's own logprobs
(compute_logprobs), as sampled tokens would. Three formats: tml-renderers (Qwen3-Instruct), a chat
template that declares tools itself (Llama 3.1) and one that takes no tools (the `tiny` stand-in, whose
loop writes the tools into the system message as text).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import re
import sys
from types import SimpleNamespace

import pytest
from e2e_kit import DATA, GENERATED, read_jsonl

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

QUESTION = "In what year was Lukoult Zaerei born?"
ANSWER = "1726"
QUERY = "Lukoult Zaerei"
# run_groups(..., seed=0) with --max-turns 4: the first turn of the group is sampled with seed 0;
# episode g then samples its turn t with seed (g + 1) * 4 + t.
SCRIPT = {0: "call", 5: "answer", 9: "malformed", 10: "wrong"}
CASES = {
    "tml-qwen3": ("grpo-tools-qwen3", "Qwen/Qwen3-4B-Instruct-2507", "family"),
    "template-llama3": ("grpo-tools-llama3", "meta-llama/Llama-3.1-8B-Instruct", "family"),
    "stand-in-without-tools": ("grpo-tools-qwen3", "Qwen/Qwen3-4B-Instruct-2507", "tiny"),
}


def load_loop(name: str):
    spec = importlib.util.spec_from_file_location(
        f"tool_episode_{name.replace('-', '_')}", GENERATED / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def encode(fmt, text: str) -> list[int]:
    """Token ids of `text` in the format's tokenizer, special tokens (<|im_end|>, ...) included."""
    if hasattr(fmt, "renderer"):
        tok = fmt.renderer.tokenizer
        special = {tok.decode([tok.encode_special(s)]): tok.encode_special(s) for s in tok.special_tokens()}
        pattern = "(" + "|".join(re.escape(s) for s in sorted(special, key=len, reverse=True) if s) + ")"
        ids: list[int] = []
        for part in re.split(pattern, text):
            if part:
                ids += [special[part]] if part in special else tok.encode_ordinary(part)
        return ids
    return fmt.tokenizer.encode(text, add_special_tokens=False)


def model_turn(loop, fmt, message: dict) -> list[int]:
    """The tokens the model emits for `message` in its format: what a demonstration of it trains."""
    tokens, weights = fmt.examples(loop.as_messages(QUESTION) + [message])[-1]
    return [token for token, weight in zip(tokens, weights, strict=True) if weight > 0]


class ScriptedPolicy:
    """A sampler whose choices come from SCRIPT (by the request's seed); the logprobs of its tokens and,
    when asked, of the prompt are the served model's own. It keeps every prompt it was shown."""

    def __init__(self, real, turns: dict[str, list[int]]):
        self.real, self.turns, self.prompts = real, turns, {}

    async def sample(self, prompt, num_samples, sampling_params, include_prompt_logprobs=False):
        tokens = prompt.to_ints()
        self.prompts[sampling_params.seed] = tokens
        turn = self.turns[SCRIPT[sampling_params.seed]]
        scored = await self.real.compute_logprobs(types.ModelInput.from_ints(tokens + turn))
        sequence = SimpleNamespace(tokens=turn, logprobs=scored[len(tokens) :], stop_reason="stop")
        prompt_logprobs = scored[: len(tokens)] if include_prompt_logprobs else None
        return SimpleNamespace(sequences=[sequence] * num_samples, prompt_logprobs=prompt_logprobs)


@pytest.fixture(params=sorted(CASES))
def episode_setup(request, family_server, server, monkeypatch):
    loop_name, model, kind = CASES[request.param]
    url = family_server(model) if kind == "family" else server
    monkeypatch.setenv("TINKER_BASE_URL", url)
    monkeypatch.setenv("TINKER_API_KEY", "tml-local")
    loop = load_loop(loop_name)
    args = loop.parse_args(
        ["--data", str(DATA / "tool-questions.jsonl"), "--corpus", str(DATA / "tool-corpus.jsonl")]
        + ["--max-turns", "4", "--max-tool-calls", "4", "--malformed-penalty", "0.25", "--init-from", ""]
    )
    return request.param, loop, args, model


def test_a_scripted_episode_runs_the_tools_grades_the_answer_and_trains_the_models_tokens(episode_setup):
    case, loop, args, model = episode_setup
    asyncio.run(scripted_episodes(case, loop, args, model))


async def scripted_episodes(case: str, loop, args, model: str) -> None:
    service = tinker.ServiceClient()
    training = await service.create_lora_training_client(base_model=model, rank=8, seed=0)
    served = training.get_info().model_data.model_name
    fmt = loop.chat_format(served, training.get_tokenizer)
    assert type(fmt).__name__ == ("TmlToolFormat" if case.startswith("tml") else "TemplateToolFormat")
    if case == "template-llama3":
        assert fmt.native  # Llama 3.1's own template declares the tools and writes the calls
    if case == "stand-in-without-tools":
        assert not fmt.native

    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "search", "arguments": json.dumps({"query": QUERY})},
    }
    call_tokens = model_turn(loop, fmt, {"role": "assistant", "content": "", "tool_calls": [call]})
    call_text = fmt.text(call_tokens)
    assert QUERY in call_text
    turns = {
        "call": call_tokens,
        "answer": model_turn(loop, fmt, {"role": "assistant", "content": ANSWER}),
        "malformed": encode(fmt, call_text.replace(json.dumps(QUERY), json.dumps(QUERY)[:-1], 1)),
        "wrong": model_turn(loop, fmt, {"role": "assistant", "content": "Beskwick"}),
    }
    real = await training.save_weights_and_get_sampling_client()
    policy = ScriptedPolicy(real, turns)
    row = next(r for r in read_jsonl(DATA / "tool-questions.jsonl") if r["prompt"] == QUESTION)
    [[good, bad]] = await loop.run_groups(policy, fmt, [row], args, 2, seed=0)

    # The search ran over the corpus, and its result is what the next prompt shows the model.
    searched = loop.open_corpus(args.corpus).search(QUERY, args.search_timeout)
    assert "born in 1726" in searched and searched.startswith("[p146] Lukoult Zaerei")
    results = [m for m in good.messages if m["role"] == "tool"]
    assert [m["content"] for m in results] == [searched]
    assert good.calls["search"] == 1 and good.malformed == 0 and good.end == "answer"
    second_prompt = fmt.text(policy.prompts[5])
    assert "born in 1726" in second_prompt and second_prompt.index(QUERY) < second_prompt.index(
        "born in 1726"
    )
    assert fmt.text(policy.prompts[0]).count("born in 1726") == 0  # not before the search
    for tool in ("search", "calculator"):
        assert tool in fmt.text(policy.prompts[0])  # declared in the first prompt

    # The malformed call went back to the model as a tool error, and the episode went on.
    assert bad.malformed == 1 and bad.end == "answer" and len(bad.turns) == 3
    error = [m for m in bad.messages if m["role"] == "tool"][-1]["content"]
    assert error.startswith("error: your message did not parse as a tool call")
    assert "did not parse as a tool call" in fmt.text(policy.prompts[10])

    # The reward is the verifier's verdict on the final answer, minus the malformed-call penalty.
    assert good.verdict["reward"] == 1.0 and good.verdict["correct"] == 1.0
    assert bad.verdict["correct"] == 0.0 and bad.verdict["reward"] == pytest.approx(-0.25)
    metrics = loop.episode_metrics([good, bad], "train")
    assert metrics["train/accuracy"] == 0.5 and metrics["train/turns"] == 2.5
    assert metrics["train/calls_search"] == 1.0 and metrics["train/malformed_calls"] == 0.5
    assert metrics["train/malformed_rate"] == pytest.approx(1 / 3)

    # The datums cover the transcript: the model's tokens carry the advantage and the sampler's
    # logprobs; the prompt, the tool's result and the template's tokens carry advantage 0.
    advantages = loop.group_advantages([good.verdict["reward"], bad.verdict["reward"]], False)
    assert advantages[0] > 0 > advantages[1]
    datums = loop.episode_datums(good, advantages[0])
    sequence, model_positions = whole_transcript(good, datums)
    targets = [t for d in datums for t in d.loss_fn_inputs["target_tokens"].data]
    advantage = [a for d in datums for a in d.loss_fn_inputs["advantages"].data]
    logprobs = [lp for d in datums for lp in d.loss_fn_inputs["logprobs"].data]
    assert len(targets) == len(advantage) == len(logprobs)
    sampled = {i for i, weight in enumerate(model_positions) if weight}
    assert sampled and len(sampled) == len(call_tokens) + len(turns["answer"])
    for i, (a, lp) in enumerate(zip(advantage, logprobs, strict=True)):
        if i in sampled:
            assert a == pytest.approx(advantages[0]) and lp < 0
        else:
            assert a == 0.0 and lp == 0.0
    tool_span = [targets[i] for i in range(len(targets)) if i not in sampled]
    assert "born in 1726" in fmt.text(tool_span)  # the tool's result is in the datum, at advantage 0
    assert sequence[: len(policy.prompts[0])] == policy.prompts[0]

    # A real training step on both episodes' datums; the good answer gets likelier, the bad one less.
    datums_D = datums + loop.episode_datums(bad, advantages[1])
    full_good = policy.prompts[5] + turns["answer"]
    full_bad = policy.prompts[10] + turns["wrong"]
    before = await answer_logprobs(real, full_good, full_bad, len(turns["answer"]), len(turns["wrong"]))
    fwd_bwd = training.forward_backward(datums_D, "importance_sampling")
    optim = training.optim_step(types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8))
    output = await fwd_bwd
    await optim
    assert math.isfinite(output.metrics["loss:sum"]) and output.metrics["loss:sum"] != 0.0
    trained = await training.save_weights_and_get_sampling_client()
    after = await answer_logprobs(trained, full_good, full_bad, len(turns["answer"]), len(turns["wrong"]))
    assert after[0] > before[0] and after[1] < before[1], (before, after)
    await service.close("success")


def whole_transcript(episode, datums) -> tuple[list[int], list[int]]:
    """The episode as one token sequence (its datums joined) and, per target position, 1 where the
    model sampled the token. Checks the datums are the turns' prompts and samples, in order."""
    sequence: list[int] = []
    sampled: list[int] = []
    for turn in episode.turns:
        if sequence and turn.prompt[: len(sequence)] == sequence:
            new = turn.prompt[len(sequence) :]
        else:
            new = turn.prompt
        sequence += new + turn.tokens
        sampled += [0] * len(new) + [1] * len(turn.tokens)
    joined = [
        token
        for d in datums
        for token in [d.model_input.to_ints()[0], *d.loss_fn_inputs["target_tokens"].data]
    ]
    assert joined == sequence
    # Target i of a datum is token i + 1 of its sequence: drop each datum's first position.
    starts, position = set(), 0
    for d in datums:
        starts.add(position)
        position += d.model_input.length + 1
    kept = [flag for i, flag in enumerate(sampled) if i not in starts]
    return sequence, kept


async def answer_logprobs(
    sampler, good: list[int], bad: list[int], n_good: int, n_bad: int
) -> tuple[float, float]:
    scored_good = await sampler.compute_logprobs(types.ModelInput.from_ints(good))
    scored_bad = await sampler.compute_logprobs(types.ModelInput.from_ints(bad))
    return sum(scored_good[-n_good:]), sum(scored_bad[-n_bad:])
