"""Invalid cards, each paired with the exact messages `rtc validate` prints (file:line:col: field: message)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rtc.cli import cli

CASES = [
    (
        "unknown top-level key with a suggestion",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\nrnak: 8\n",
        ["card.yaml:7:1: rnak: unknown field; did you mean 'rank'?"],
    ),
    (
        "unknown nested key",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n"
        "sampling:\n  temprature: 0.5\n",
        ["card.yaml:8:3: sampling.temprature: unknown field; did you mean 'temperature'?"],
    ),
    (
        "missing required field",
        "name: a\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n",
        ["card.yaml:1:1: title: missing required field"],
    ),
    (
        "model with the wrong case",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: qwen/qwen3-8b\n",
        [
            "card.yaml:6:8: model: 'qwen/qwen3-8b' is not one of: see `rtc list models`; did you mean 'Qwen/Qwen3-8B'?"
        ],
    ),
    (
        "duplicate key",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n"
        "steps: 5\nsteps: 6\n",
        ["card.yaml:8:1: steps: duplicate key (first set on line 7); keep one"],
    ),
    (
        "name is not a slug",
        "name: My Card\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n",
        ["card.yaml:1:7: name: 'My Card' is not a slug: use lowercase letters, digits and '-'"],
    ),
    (
        "quoted learning rate is a string",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\nlr: '5e-4'\n",
        ["card.yaml:7:5: lr: expected number, got string '5e-4'"],
    ),
    (
        "negative steps",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\nsteps: -3\n",
        ["card.yaml:7:8: steps: -3 is less than the minimum of 1"],
    ),
    (
        "method does not fit the signal",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: dpo\ntask: chat\nmodel: Qwen/Qwen3-8B\n",
        [
            "card.yaml:4:9: method: method dpo learns from preferences, not demonstrations; "
            "for demonstrations use: rewrite, sdft, sft"
        ],
    ),
    (
        "loss does not fit the method",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: math\nmodel: Qwen/Qwen3-8B\nloss: cross_entropy\n",
        [
            "card.yaml:7:7: loss: loss cross_entropy does not fit method grpo; "
            "use one of: importance_sampling, ppo, cispo, dro"
        ],
    ),
    (
        "task does not fit the signal",
        "name: a\ntitle: t\nsignal: preferences\nmethod: dpo\ntask: code\nmodel: Qwen/Qwen3-8B\n",
        [
            "card.yaml:5:7: task: task code does not fit signal preferences; for preferences use: chat, tool-agents"
        ],
    ),
    (
        "grpo on a task without a verifier, and no reward model",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: chat\nmodel: Qwen/Qwen3-8B\n",
        [
            "card.yaml:5:7: task: task chat has no verifier: set reward: model and a reward_model (or pass "
            "--reward-model), or use task rubric with a judge"
        ],
    ),
    (
        "loss option of another loss",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: math\nmodel: Qwen/Qwen3-8B\nloss: ppo\n"
        "loss_config:\n  beta: 0.1\n",
        [
            "card.yaml:9:3: loss_config.beta: loss ppo takes no option 'beta' "
            "(it takes: clip_low_threshold, clip_high_threshold)"
        ],
    ),
    (
        "clip thresholds the wrong way round",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: math\nmodel: Qwen/Qwen3-8B\nloss: ppo\n"
        "loss_config:\n  clip_low_threshold: 1.2\n  clip_high_threshold: 0.8\n",
        [
            "card.yaml:9:3: loss_config: clip thresholds must satisfy clip_low_threshold < 1 < clip_high_threshold"
        ],
    ),
    (
        "field the method does not use",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\ngroup_size: 4\n",
        [
            "card.yaml:7:1: group_size: does not apply to method sft (only to distill, grpo, prompt_distill, rewrite, sdft); remove it"
        ],
    ),
    (
        "grpo with one sample per prompt",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: math\nmodel: Qwen/Qwen3-8B\ngroup_size: 1\n",
        ["card.yaml:7:13: group_size: grpo needs at least 2 samples per prompt to compare them; use 4 to 16"],
    ),
    (
        "max_tokens beyond the context",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: math\nmodel: Qwen/Qwen3-8B\n"
        "sampling:\n  max_tokens: 40000\n",
        ["card.yaml:8:15: sampling.max_tokens: must leave room for the prompt: 40000 >= max length 32768"],
    ),
    (
        "missing data file",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\n"
        "data:\n  train: data/nope.jsonl\n",
        ["card.yaml:8:10: data.train: no such file: data/nope.jsonl"],
    ),
    (
        "not a mapping",
        "- name: a\n",
        ["card.yaml:1:1: (card): a card must be a mapping of fields (key: value)"],
    ),
    (
        "broken YAML: reported where the bracket opened",
        "name: a\ntitle: [unclosed\nsignal: environment\n",
        [
            "card.yaml:2:8: (card): invalid YAML: the flow sequence opened here is not closed "
            "(expected ',' or ']', but got ':' at line 3, column 7)"
        ],
    ),
    (
        "a NUL byte",
        "name: a\ntitle: t\x00\n",
        ["card.yaml:2:9: (card): invalid YAML: the character '\\x00' is not allowed in a card; remove it"],
    ),
    (
        "a ratio loss sampled at a temperature other than 1",
        "name: a\ntitle: t\nsignal: environment\nmethod: grpo\ntask: math\nmodel: Qwen/Qwen3-8B\nloss: ppo\n"
        "sampling:\n  temperature: 0.8\n",
        [
            "card.yaml:9:16: sampling.temperature: ppo compares the trainer's logprobs (at temperature 1) "
            "with the sampler's (at the sampling temperature): at 0.8 their ratio is off from the first step "
            "and rare tokens get clipped; use temperature 1 (tinker-cookbook pins it for RL)"
        ],
    ),
    (
        "a thinking switch on a model without one",
        "name: a\ntitle: t\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: openai/gpt-oss-20b\n"
        "thinking: off\n",
        [
            "card.yaml:7:1: thinking: openai/gpt-oss-20b has no thinking switch (its format, gpt-oss, is "
            "always only); remove it"
        ],
    ),
    (
        "empty file",
        "",
        ["card.yaml:1:1: (card): the card is empty; start from `rtc new`"],
    ),
    (
        "several problems at once, in line order",
        "name: a\ntitle: 5\nsignal: demonstrations\nmethod: sft\ntask: chat\nmodel: Qwen/Qwen3-8B\nrank: big\n"
        "colour: blue\n",
        [
            "card.yaml:2:8: title: expected string, got integer 5",
            "card.yaml:7:7: rank: expected integer, got string 'big'",
            "card.yaml:8:1: colour: unknown field",
        ],
    ),
]


@pytest.mark.parametrize(("case", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_invalid_card_messages(tmp_path, monkeypatch, case, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "card.yaml").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", "card.yaml"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    want = expected
    assert lines[:-1] == want
    assert lines[-1] == f"{len(want)} problem{'s' if len(want) != 1 else ''} found"
    assert "Traceback" not in result.output


def test_at_least_fifteen_distinct_invalid_cards():
    assert len({text for _, text, _ in CASES}) >= 15


def test_failed_compile_keeps_previous_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "card.yaml").write_text("name: a\ntitle: t\n", encoding="utf-8")
    (tmp_path / "loop.py").write_text("# the previous loop\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["compile", "card.yaml", "-o", "loop.py"])
    assert result.exit_code == 1
    assert (tmp_path / "loop.py").read_text() == "# the previous loop\n"
    assert {p.name for p in tmp_path.iterdir()} == {"card.yaml", "loop.py"}  # no temporary left behind


def test_missing_card_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["compile", "nope.yaml"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: nope.yaml: no such file"
