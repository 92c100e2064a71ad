"""Rewards from a model: the card rules of reward, reward_model, judge, rubric and length_penalty
(exact messages), and the generated loop's judge and reward model against scripted samplers: a
malformed verdict is retried once, then scores 0 and is counted, never raised; verdicts are cached."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rtc.cli import cli

ROOT = Path(__file__).resolve().parents[2]
HEAD = "name: a\ntitle: t\nsignal: environment\nmethod: grpo\nmodel: Qwen/Qwen3-4B-Instruct-2507\n"
RUBRIC = (
    "rubric:\n  criteria:\n    - {name: correct, description: Right., weight: 3}\n"
    "    - {name: brief, description: Short.}\n"
)

CASES = [
    (
        HEAD + "task: chat\n",
        [
            "card.yaml:6:7: task: task chat has no verifier: set reward: model and a reward_model (or pass "
            "--reward-model), or use task rubric with a judge"
        ],
    ),
    (
        HEAD + "task: math\nreward: model\n",
        [
            "card.yaml:7:9: reward: task math has its own verifier; reward: model is for tasks without one (chat)"
        ],
    ),
    (
        HEAD + "task: chat\nreward: model\nreward_model: tinker://run/weights/rm-final\n",
        [
            "card.yaml:8:15: reward_model: 'tinker://run/weights/rm-final' is not a sampler checkpoint: use the "
            "tinker://<run>/sampler_weights/<name> path that a reward-model run lists as sampler_path in its "
            "checkpoints.jsonl"
        ],
    ),
    (
        HEAD + "task: chat\nreward: model\nreward_model: meta-llama/Llama-3.1-8B-Instruct\n",
        [
            "card.yaml:8:15: reward_model: meta-llama/Llama-3.1-8B-Instruct renders in another chat format than "
            "Qwen/Qwen3-4B-Instruct-2507; the reward_model must share the policy's format: one of "
            "Qwen/Qwen3-235B-A22B-Instruct-2507, Qwen/Qwen3-30B-A3B-Instruct-2507, Qwen/Qwen3-4B-Instruct-2507, "
            "Qwen/Qwen3-VL-235B-A22B-Instruct, Qwen/Qwen3-VL-30B-A3B-Instruct"
        ],
    ),
    (
        HEAD + "task: math\njudge: Qwen/Qwen3-4B-Instruct-2507\nlength_penalty: 0.1\n",
        [
            "card.yaml:7:1: judge: applies only to task rubric (this card's task is math); remove it",
            "card.yaml:8:1: length_penalty: applies only to rewards from a model (reward: model, or task "
            "rubric); remove it",
        ],
    ),
    (
        HEAD + "task: rubric\nreward: model\n" + RUBRIC,
        ["card.yaml:7:1: reward: task rubric is graded by its judge (the judge field); remove it"],
    ),
    (
        HEAD
        + "task: rubric\nrubric:\n  criteria:\n    - {name: a, description: x}\n    - {name: a, description: y}\n",
        ["card.yaml:8:3: rubric: criteria[1].name 'a' is used twice"],
    ),
    (
        "name: a\ntitle: t\nsignal: preferences\nmethod: reward_model\ntask: chat\n"
        "model: Qwen/Qwen3-4B-Instruct-2507\nreward: model\nloss_config: {centering: -1}\n",
        [
            "card.yaml:7:1: reward: does not apply to method reward_model (only to grpo); remove it",
            "card.yaml:8:26: loss_config.centering: must be 0 or more",
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_reward_card_rules(tmp_path, monkeypatch, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "card.yaml").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", "card.yaml"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("card.yaml:")]
    assert lines == expected


def test_valid_reward_cards(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for text in (
        HEAD + "task: chat\nreward: model\n",  # the reward model comes with --reward-model
        HEAD
        + "task: chat\nreward: model\nreward_model: tinker://r/sampler_weights/rm\nlength_penalty: 0.2\n",
        HEAD + "task: rubric\njudge: Qwen/Qwen3-30B-A3B-Instruct-2507\n" + RUBRIC,
        HEAD + "task: rubric\n",  # every row brings its own rubric
    ):
        (tmp_path / "card.yaml").write_text(text, encoding="utf-8")
        result = CliRunner().invoke(cli, ["validate", "card.yaml"])
        assert result.exit_code == 0, text + result.output


# ---- The generated loop's judge and reward model, against scripted samplers ----


def load_loop(name: str):
    path = ROOT / "generated" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_rtc_loop_{name.replace('-', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rubric_loop():
    pytest.importorskip("tinker")
    return load_loop("grpo-rubric-qwen3")


class TextFormat:
    """A chat format whose tokens are UTF-8 bytes: enough to drive the judge."""

    stop = [0]

    def __init__(self, loop):
        self.loop = loop

    def prompt(self, messages, room=0):
        return self.loop.Prompt(list(messages[-1]["content"].encode()))

    def reply(self, prompt, tokens, stop_reason):
        return self.loop.Reply(bytes(tokens).decode(), "", stop_reason == "stop")


class ScriptedSampler:
    """Answers each sample request with the next scripted text; records the requests."""

    def __init__(self, texts: list[tuple[str, str]]):
        self.texts, self.requests = list(texts), []

    async def sample(self, prompt, num_samples, sampling_params):
        self.requests.append(sampling_params)
        await asyncio.sleep(0)
        text, stop_reason = self.texts.pop(0)
        sequence = type("Sequence", (), {"tokens": list(text.encode()), "stop_reason": stop_reason})
        return type("Response", (), {"sequences": [sequence]})


def grade(loop, sampler, answers=("Paris.",), metadata=None):
    judge = loop.Judge(sampler, TextFormat(loop), max_tokens=64)
    messages = [{"role": "user", "content": "Capital of France?"}]

    async def run():
        return await asyncio.gather(*(judge.grade(messages, a, metadata or {}) for a in answers))

    return judge, asyncio.run(run())


def test_a_well_formed_verdict_is_the_weighted_reward(rubric_loop):
    verdict = '{"correct": 5, "direct": 1, "follow_up": 1}'  # the card's rubric: weights 2, 1, 1
    sampler = ScriptedSampler([(verdict, "stop")])
    judge, [result] = grade(rubric_loop, sampler)
    assert result["reward"] == 0.5 and result["judge_retried"] == 0.0 and "judge_malformed" not in result
    assert len(sampler.requests) == 1 and sampler.requests[0].temperature == rubric_loop.JUDGE_TEMPERATURE


def test_a_malformed_verdict_is_asked_once_more(rubric_loop):
    sampler = ScriptedSampler(
        [("I'd say 5/5!", "stop"), ('{"correct": 5, "direct": 5, "follow_up": 5}', "stop")]
    )
    judge, [result] = grade(rubric_loop, sampler)
    assert result["reward"] == 1.0 and result["judge_retried"] == 1.0
    assert [r.temperature for r in sampler.requests] == [0.0, 1.0]  # a greedy judge would repeat itself
    assert judge.malformed == 0


@pytest.mark.parametrize(
    "second",
    [
        ("still not json", "stop"),
        ('{"correct": 9, "direct": 1, "follow_up": 1}', "stop"),
        ('{"correct"', "length"),
    ],
)
def test_twice_malformed_scores_zero_and_is_counted(rubric_loop, second, capsys):
    sampler = ScriptedSampler([("Score: 5", "stop"), second])
    judge, [result] = grade(rubric_loop, sampler)
    assert result["reward"] == 0.0 and result["judge_malformed"] == 1.0
    assert judge.malformed == 1 and len(sampler.requests) == 2
    assert "a malformed judge verdict scores 0" in capsys.readouterr().out


def test_verdicts_are_cached_per_conversation_answer_and_rubric(rubric_loop):
    good = ('{"correct": 5, "direct": 5, "follow_up": 1}', "stop")
    sampler = ScriptedSampler([good, good])
    judge, results = grade(rubric_loop, sampler, answers=("Paris.", "Paris.", "Lyon."))
    assert len(sampler.requests) == 2  # the repeated answer was asked once, while in flight
    assert [r["judge_cached"] for r in results] == [0.0, 1.0, 0.0]
    own = {"rubric": {"criteria": [{"name": "ok", "description": "Fine."}]}}
    sampler.texts = [('{"ok": 5}', "stop")]
    asyncio.run(judge.grade([{"role": "user", "content": "Capital of France?"}], "Paris.", own))
    assert len(sampler.requests) == 3  # another rubric: another question


def test_reward_model_reward_is_the_sigmoid_of_yes_no_log_odds():
    pytest.importorskip("tinker")
    loop = load_loop("rlhf-3-grpo-qwen3")

    class Format:
        def examples(self, messages, cut=True):
            tokens = list(messages[-1]["content"].encode())  # the verdict turn
            return [([7, 7, *tokens], [0.0, 0.0] + [1.0] * len(tokens))]

    class Sampler:
        calls = 0

        async def compute_logprobs(self, model_input):
            Sampler.calls += 1
            tokens = model_input.to_ints()
            per_token = -0.1 if bytes(tokens[2:]) == b"Yes" else -1.0
            return [None, -5.0] + [per_token] * (len(tokens) - 2)

    rm = loop.RewardModel(Sampler(), Format())
    messages = [{"role": "user", "content": "Hi"}]

    async def run():
        return await asyncio.gather(rm.grade(messages, "Hello", {}), rm.grade(messages, "Hello", {}))

    first, second = asyncio.run(run())
    log_odds = 3 * -0.1 - 2 * -1.0  # "Yes": 3 tokens; "No": 2 tokens
    assert first["rm_score"] == pytest.approx(log_odds)
    assert first["reward"] == pytest.approx(1 / (1 + math.exp(-log_odds)))
    assert first == second and Sampler.calls == 2  # each verdict asked once
