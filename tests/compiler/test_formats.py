"""Every loop trains, samples, stops and grades in its model family's real chat format.

Each family path is checked against Thinking Machines' own renderers (tml-renderers), built here
independently of the loop: the trained tokens and weights of a demonstration, the stop tokens, and
what the grader reads (the final answer, never the reasoning; nothing from a cut-off turn). The
Hugging Face chat-template path and the base-model path are checked with a real tokenizer.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rtc.build import compile_card
from rtc.catalog import load_catalog

tinker = pytest.importorskip("tinker")
tml = pytest.importorskip("tml_renderers")
from tml_renderers import chat, renderers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"
CATALOG = load_catalog()


def load_loop(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compile_loop(tmp_path: Path, model: str, method: str = "sft", thinking: str | None = None, **extra):
    """Compile a small card for `model` and import its loop."""
    signal = CATALOG.methods[method].signal
    task = {"environment": "match", "preferences": "chat", "demonstrations": "chat"}[signal]
    lines = [
        "name: fmt",
        "title: format check",
        f"signal: {signal}",
        f"method: {method}",
        f"task: {task}",
        f"model: {model}",
    ]
    if thinking:
        lines.append(f"thinking: {thinking}")
    lines += [f"{key}: {json.dumps(value)}" for key, value in extra.items()]
    card = tmp_path / f"{re.sub(r'[^a-z0-9]+', '-', model.lower())}-{thinking}.yaml"
    card.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, source = compile_card(card)
    loop = card.with_suffix(".py")
    loop.write_text(source, encoding="utf-8")
    return load_loop(loop, f"fmt_{abs(hash(str(loop)))}")


def tml_renderer(mode):
    """The renderer of a catalog mode, constructed here as tml-renderers documents it."""
    cls, _, factory = mode.constructor.partition(".")
    target = getattr(renderers, cls)
    return (getattr(target, factory) if factory else target)(**mode.args)


def encode(renderer, text: str) -> list[int]:
    """Token ids of `text`, special tokens (<|im_end|>, <think>, <|channel|>, ...) included."""
    tok = renderer.tokenizer
    special = {
        tok.decode([tok.encode_special(name)]): tok.encode_special(name) for name in tok.special_tokens()
    }
    pattern = "(" + "|".join(re.escape(s) for s in sorted(special, key=len, reverse=True) if s) + ")"
    ids: list[int] = []
    for part in re.split(pattern, text):
        if part:
            ids += [special[part]] if part in special else tok.encode_ordinary(part)
    return ids


# One model per tml-renderers mode of the catalog: every family's path, every thinking mode.
TML_MODES = [
    (model.name, mode_name)
    for renderer in CATALOG.renderers.values()
    if renderer.kind == "tml"
    for mode_name in renderer.modes
    for model in [next(m for m in CATALOG.models.values() if m.renderer == renderer.name)]
]


@pytest.mark.parametrize(("model", "mode"), TML_MODES, ids=[f"{m.split('/')[-1]}-{t}" for m, t in TML_MODES])
def test_trained_tokens_are_the_renderers_and_sampling_stops_on_its_tokens(tmp_path, model, mode):
    renderer_spec = CATALOG.renderers[CATALOG.models[model].renderer]
    thinking = mode if renderer_spec.switchable else None
    loop = compile_loop(tmp_path, model, thinking=thinking)
    fmt = loop.family_format(tokenizer=None)
    reference = tml_renderer(renderer_spec.modes[mode])
    row = {"prompt": "What is the capital of Japan?", "completion": "Tokyo."}
    messages = loop.conversation(row["prompt"], row["completion"])

    expected = reference.render_for_sft(chat.OpenAIMessage.from_oss_messages(messages))
    datums = loop.demonstration_datums(fmt, row)
    assert len(datums) == len(expected) == 1
    tokens = [t for span in expected[0].input_token_spans for t in span.span.tokens]
    weights = [float(w) for w in expected[0].per_token_loss_weight_unshifted]
    assert datums[0].model_input.to_ints() == tokens[:-1]
    assert datums[0].loss_fn_inputs["target_tokens"].data == tokens[1:]
    assert datums[0].loss_fn_inputs["weights"].data == weights[1:]
    # What the catalog (and rtc explain) says is trained is what is trained.
    trained = [t for t, w in zip(tokens, weights, strict=True) if w > 0]
    answer = reference.tokenizer.decode(trained).replace("Tokyo.", "ANSWER")
    assert answer == renderer_spec.modes[mode].trained

    assert fmt.stop == list(reference.stop())
    spans, _ = reference.render_for_completion(chat.OpenAIMessage.from_oss_messages(messages[:-1]))
    assert fmt.prompt(messages[:-1]).tokens == [t for span in spans for t in span.span.tokens]


def test_each_card_trains_what_its_family_emits():
    """The defects of the old template path, card by card: gpt-oss trains its final channel and
    <|return|>; Nemotron closes the think block its prompt opens; Qwen3 hybrid trains the empty
    think block; a Qwen3 instruct model trains the answer alone."""
    cases = {
        "sdft-tool-agents-nemotron": ("</think>\n", "<|im_end|>"),
        "sft-chat-qwen3": ("", "<|im_end|>"),
    }
    for name, (start, end) in cases.items():
        loop = load_loop(GENERATED / f"{name}.py", f"card_{name.replace('-', '_')}")
        fmt = loop.family_format(tokenizer=None)
        row = {"prompt": "Say hi.", "completion": "Hi."}
        ((tokens, weights),) = fmt.examples(loop.conversation(row["prompt"], row["completion"]))
        trained = fmt.text([t for t, w in zip(tokens, weights, strict=True) if w > 0])
        assert trained.startswith(start) and trained.endswith("Hi." + end), (name, trained)
    gpt = load_loop(GENERATED / "grpo-json-gpt-oss.py", "card_gpt_oss")
    fmt = gpt.family_format(tokenizer=None)
    ((tokens, weights),) = fmt.examples(gpt.conversation("q", "{}"))
    assert fmt.text([t for t, w in zip(tokens, weights, strict=True) if w > 0]) == (
        "<|channel|>final<|message|>{}<|return|>"
    )
    qwen = load_loop(GENERATED / "grpo-math-qwen3.py", "card_qwen3")
    ((tokens, weights),) = qwen.family_format(None).examples(qwen.conversation("q", "4"))
    assert qwen.family_format(None).text([t for t, w in zip(tokens, weights, strict=True) if w > 0]) == (
        "<think>\n\n</think>\n\n4<|im_end|>"
    )


def sampled(loop, fmt, text: str, stop_reason: str = "stop"):
    prompt = fmt.prompt(loop.as_messages("q"))
    return fmt.reply(prompt, encode(fmt.renderer, text), stop_reason)


def test_gpt_oss_grader_reads_the_final_channel_not_the_analysis():
    loop = load_loop(GENERATED / "grpo-json-gpt-oss.py", "grade_gpt_oss")
    fmt = loop.family_format(tokenizer=None)
    metadata = {"expected": {"name": "Kenji"}}
    right, wrong = '{"name": "Kenji"}', '{"name": "Ken"}'
    draft_right = sampled(
        loop,
        fmt,
        f"<|channel|>analysis<|message|>{right}<|end|><|start|>assistant<|channel|>final<|message|>{wrong}<|return|>",
    )
    assert draft_right.answer == wrong and right in draft_right.thinking
    assert loop.grade((draft_right, metadata, False))["reward"] < 1.0
    final_right = sampled(
        loop,
        fmt,
        f"<|channel|>analysis<|message|>{wrong}<|end|><|start|>assistant<|channel|>final<|message|>{right}<|return|>",
    )
    assert loop.grade((final_right, metadata, False))["reward"] == 1.0
    # Only a draft, cut at max_tokens: nothing to grade.
    cut = sampled(loop, fmt, f"<|channel|>analysis<|message|>{right}", stop_reason="length")
    assert not cut.ended
    assert loop.grade((cut, metadata, False)) == {"reward": 0.0, "correct": 0.0, "truncated": 1.0}


def test_thinking_is_never_graded_and_a_cut_off_answer_earns_nothing():
    loop = load_loop(GENERATED / "grpo-math-qwen3.py", "grade_qwen3")
    fmt = loop.family_format(tokenizer=None)
    metadata = {"answer": "42"}
    thought_right = sampled(loop, fmt, "<think>\nit is \\boxed{42}\n</think>\n\n\\boxed{41}<|im_end|>")
    assert (
        thought_right.answer == "\\boxed{41}"
        and loop.grade((thought_right, metadata, False))["reward"] == 0.0
    )
    right = sampled(loop, fmt, "<think>\nhmm\n</think>\n\n\\boxed{42}<|im_end|>")
    assert loop.grade((right, metadata, False))["reward"] == 1.0
    # "... so the answer is 42. Hmm, wait" cut at max_tokens: the old loop graded the whole draft.
    cut = sampled(loop, fmt, "<think>\nso the answer is \\boxed{42}. Hmm, wait", stop_reason="length")
    verdict = loop.grade((cut, metadata, False))
    assert verdict["reward"] == 0.0 and verdict["truncated"] == 1.0
    # --grade-truncated (the card's grade_truncated) grades a cut-off turn's answer, if it has one.
    cut_after_answer = sampled(loop, fmt, "<think>\nok\n</think>\n\n\\boxed{42} and", stop_reason="length")
    assert loop.grade((cut_after_answer, metadata, True))["reward"] == 1.0
    assert loop.parse_args(["--data", "d", "--grade-truncated"]).grade_truncated is True
    # Thinking that never closes has no answer, even when the turn ended.
    unclosed = sampled(loop, fmt, "<think>\n\\boxed{42}<|im_end|>")
    assert unclosed.answer is None and loop.grade((unclosed, metadata, False))["no_answer"] == 1.0


def test_verifier_scores_are_logged_as_metrics():
    loop = load_loop(GENERATED / "grpo-math-qwen3.py", "metrics_qwen3")
    verdicts = [
        {"reward": 1.0, "correct": 1.0, "format": 1.0, "metadata_ok": 1.0},
        {"reward": 0.0, "correct": 0.0, "truncated": 1.0},
    ]
    assert loop.verdict_metrics(verdicts, "train") == {
        "train/accuracy": 0.5,
        "train/format": 0.5,
        "train/metadata_ok": 0.5,
        "train/reward": 0.5,
        "train/truncated": 0.5,
    }


def test_tool_traces_train_the_models_calls_not_the_tool_results():
    loop = load_loop(GENERATED / "sdft-tool-agents-nemotron.py", "tools_nemotron")
    fmt = loop.family_format(tokenizer=None)
    rows = [json.loads(line) for line in (ROOT / "recipes/data/tool-agents.jsonl").read_text().splitlines()]
    traced = [row for row in rows if isinstance(row["completion"], list)]
    assert traced, "the tool-agents data carries tool traces as messages"
    for row in traced:
        # Each tool result gets a marker no answer repeats, to find where it lands.
        for i, message in enumerate(m for m in row["completion"] if m["role"] == "tool"):
            message["content"] = f"RESULT{i}ZQX " + message["content"]
        results = [m["content"] for m in row["completion"] if m["role"] == "tool"]
        calls = [c["function"]["name"] for m in row["completion"] for c in m.get("tool_calls", [])]
        assert results and calls
        trained, seen = "", ""
        for tokens, weights in fmt.examples(loop.conversation(row["prompt"], row["completion"])):
            trained += fmt.text([t for t, w in zip(tokens, weights, strict=True) if w > 0])
            seen += fmt.text(tokens)
        for i, result in enumerate(results):
            assert result in seen  # the model reads each tool result in a later turn's prompt
            assert f"RESULT{i}ZQX" not in trained  # tool results are read, never trained
        for name in calls:
            assert f"<function={name}>" in trained  # the model's own calls are trained
        assert row["completion"][-1]["content"] in trained  # and its final answer


def test_base_models_get_plain_text_and_a_stop_text(tmp_path):
    loop = compile_loop(tmp_path, "Qwen/Qwen3-8B-Base")
    fmt = loop.family_format(tokenizer=None)
    assert fmt.stop == ["\n\nUser:"]
    prompt = fmt.prompt(loop.as_messages("What is 2+2?"))
    assert fmt.text(prompt.tokens) == "User: What is 2+2?\n\nAssistant:"
    ((tokens, weights),) = fmt.examples(loop.conversation("What is 2+2?", "4"))
    assert fmt.text([t for t, w in zip(tokens, weights, strict=True) if w > 0]) == " 4\n\nUser:"
    assert tokens[: len(prompt.tokens)] == prompt.tokens
    reply = fmt.reply(prompt, fmt.encode(" 4\n\nUser:"), "stop")
    assert reply.answer == "4" and reply.ended
    assert "<|im_start|>" not in fmt.text(tokens)  # no chat template


@pytest.fixture(scope="module")
def chatml_tokenizer():
    models = pytest.importorskip("rtc.server.models")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(models.prepare_model("tiny")))


def test_a_served_model_outside_the_family_uses_its_own_chat_template(chatml_tokenizer, capsys):
    loop = load_loop(GENERATED / "sft-chat-qwen3.py", "standin_qwen3")
    fmt = loop.chat_format("HuggingFaceTB/SmolLM2-135M-Instruct", lambda: chatml_tokenizer)
    assert isinstance(fmt, loop.TemplateFormat)
    assert "using its own chat template" in capsys.readouterr().out
    eot = chatml_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert fmt.stop == [eot]
    messages = loop.conversation("Hello there", "Hi!")
    ((tokens, weights),) = fmt.examples(messages)
    prompt_text = chatml_tokenizer.apply_chat_template(
        messages[:-1], tokenize=False, add_generation_prompt=True
    )
    prompt = chatml_tokenizer.encode(prompt_text, add_special_tokens=False)
    assert tokens[: len(prompt)] == prompt and not any(weights[: len(prompt)])
    trained = [t for t, w in zip(tokens, weights, strict=True) if w > 0]
    assert trained[-1] == eot and chatml_tokenizer.decode(trained[:-1]) == "Hi!"
    # The card's own model keeps the family format.
    assert isinstance(loop.chat_format("Qwen/Qwen3-4B-Instruct-2507", None), loop.TmlFormat)


def test_a_template_that_is_not_a_prefix_is_refused(chatml_tokenizer):
    loop = load_loop(GENERATED / "dpo-chat-llama3.py", "prefix_llama3")
    odd = type(chatml_tokenizer).from_pretrained(chatml_tokenizer.name_or_path)
    # The generation prompt opens a think block the rendered conversation does not have.
    odd.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
    )
    fmt = loop.TemplateFormat(odd, "odd")
    with pytest.raises(loop.FormatError, match="not a token prefix"):
        fmt.examples(loop.conversation("q", "a"))


def test_cut_to_length_keeps_the_trained_end_and_counts(chatml_tokenizer):
    loop = load_loop(GENERATED / "sft-chat-qwen3.py", "cut_qwen3")
    fmt = loop.TemplateFormat(chatml_tokenizer, "tiny")
    messages = loop.conversation("Hello there, how are you today?", "Fine.")
    ((full, _),) = fmt.examples(messages)
    fmt.max_length = len(full) - 3  # the service's context, once connected
    ((tokens, weights),) = fmt.examples(messages)
    assert tokens == full[3:] and len(weights) == len(tokens) and fmt.truncated == 1
    assert fmt.examples(messages, cut=False)[0][0] == full and fmt.truncated == 1  # measured, not cut
    prompt = fmt.prompt(messages[:-1], room=5)
    assert len(prompt.tokens) == fmt.max_length - 5 and fmt.truncated == 2


RL_LOSSES = {"importance_sampling": {}, "ppo": {}, "cispo": {}, "dro": {"beta": 0.05}}


@pytest.mark.parametrize("loss", sorted(RL_LOSSES))
def test_rl_losses_put_no_gradient_on_prompt_tokens(loss):
    """With the sampler's own prompt logprobs on prompt positions (the loop asks for them with DRO),
    every RL loss of the server gives the prompt zero gradient; DRO did not before."""
    torch = pytest.importorskip("torch")
    losses = pytest.importorskip("rtc.server.losses")
    loop = load_loop(GENERATED / "grpo-json-gpt-oss.py", f"rl_{loss}")
    prompt, prompt_lp = [5, 6, 7, 8], [None, -1.2, -0.7, -2.5]
    sequence = SimpleNamespace(tokens=[9, 10], logprobs=[-0.3, -0.9])
    datum = loop.rl_datum(prompt, prompt_lp, sequence, advantage=0.8)
    inputs = {
        key: torch.tensor(value.data) for key, value in datum.loss_fn_inputs.items() if key != "target_tokens"
    }
    # The trainer's logprobs at the sampler's weights: the same numbers the sampler gave.
    logprobs = inputs["logprobs"].clone().requires_grad_(True)
    spec = losses.check_loss(loss, RL_LOSSES[loss])
    losses.datum_loss(spec, logprobs, inputs).sum().backward()
    assert logprobs.grad[:3].abs().max().item() == 0.0  # prompt targets
    assert logprobs.grad[3:].abs().min().item() > 0.0  # the sampled tokens learn
    if loss == "dro":  # zeros in place of the prompt logprobs (the old loop) put gradient there
        old = loop.rl_datum(prompt, None, sequence, advantage=0.8)
        zeros = {k: torch.tensor(v.data) for k, v in old.loss_fn_inputs.items() if k != "target_tokens"}
        logprobs = inputs["logprobs"].clone().requires_grad_(True)
        losses.datum_loss(spec, logprobs, zeros).sum().backward()
        assert logprobs.grad[:3].abs().max().item() > 0.0


def test_the_loop_asks_for_prompt_logprobs_only_for_dro():
    loop = load_loop(GENERATED / "grpo-json-gpt-oss.py", "dro_ask")
    assert loop.LOSS == "dro"
    source = (GENERATED / "grpo-json-gpt-oss.py").read_text()
    assert 'include_prompt_logprobs=LOSS == "dro"' in source


def test_ratio_losses_refuse_a_sampling_temperature_other_than_1(capsys):
    loop = load_loop(GENERATED / "grpo-code-llama3.py", "temperature_ppo")
    with pytest.raises(SystemExit) as info:
        loop.parse_args(["--data", "d.jsonl", "--temperature", "0.8"])
    assert info.value.code == 2
    assert "--temperature must be 1 with ppo" in capsys.readouterr().err
