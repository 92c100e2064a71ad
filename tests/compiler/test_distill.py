"""The distillation loops' own parts, imported from generated/ and driven by scripted teachers: the SDFT
datums carry the teacher's top-K at the student's positions, token by token; on-policy distillation's
advantages are the teacher's logprob minus the student's; the teacher reads its own system prompt and
the student never does; and the cards that name a teacher are validated."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from rtc.cli import cli

tinker = pytest.importorskip("tinker")
pytest.importorskip("tml_renderers")

GENERATED = Path(__file__).resolve().parents[2] / "generated"


def load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"distill_{name.replace('-', '_')}", GENERATED / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sdft = load("sdft-tool-agents-nemotron")
distill = load("distill-math-qwen3")


class ScriptedTopK:
    """A teacher sampling client whose top-K at absolute position p of the sequence it reads are the
    tokens 7000 + p, 8000 + p, 9000 + p with fixed logprobs, so a target names where it came from."""

    LOGPROBS = (-0.5, -1.5, -3.0)

    def __init__(self):
        self.calls = []

    async def sample(self, prompt, num_samples, sampling_params, **kwargs):
        tokens = prompt.to_ints()
        self.calls.append((tokens, num_samples, sampling_params, kwargs))
        scored = kwargs["prompt_logprobs_last_n"]
        rows = [None] * (len(tokens) - scored)
        rows += [
            [(base + p, lp) for base, lp in zip((7000, 8000, 9000), self.LOGPROBS, strict=True)]
            for p in range(len(tokens) - scored, len(tokens))
        ]
        return SimpleNamespace(topk_prompt_logprobs=rows)


def answer_group(prompt_tokens: list[int], answer: list[int]):
    sequence = SimpleNamespace(tokens=answer, logprobs=[-1.0] * len(answer), stop_reason="length")
    return (SimpleNamespace(tokens=prompt_tokens), SimpleNamespace(sequences=[sequence]))


def test_sdft_datums_carry_the_teachers_top_k_at_the_students_positions():
    fmt = sdft.family_format(tokenizer=None)
    row = {"prompt": "Will it rain in Oslo today?", "completion": "Call weather(Oslo) first. DEMOZQX"}
    args = SimpleNamespace(max_tokens=8, topk=3)
    student = fmt.prompt(sdft.as_messages(row["prompt"]), room=args.max_tokens).tokens
    answer = [101, 102, 103, 104, 105, 106, 107]
    teacher = ScriptedTopK()

    datums, stats = asyncio.run(
        sdft.teacher_targets(teacher, fmt, [row], [answer_group(student, answer)], args)
    )

    # The teacher read its own prompt (the task and the demonstration), then the student's answer.
    ((sequence, num_samples, params, kwargs),) = teacher.calls
    teacher_prompt = fmt.prompt(sdft.teacher_messages(row), room=args.max_tokens).tokens
    assert sequence == teacher_prompt + answer
    assert "DEMOZQX" in fmt.text(teacher_prompt) and "DEMOZQX" not in fmt.text(student)
    assert num_samples == 1 and params.max_tokens == 1
    assert kwargs == {
        "include_prompt_logprobs": True,
        "topk_prompt_logprobs": 3,
        "prompt_logprobs_last_n": len(answer),
    }

    # The student's datum, position by position: the input is its prompt and answer; the input position
    # that predicts answer token t carries the teacher's top-K at teacher position len(teacher_prompt) + t.
    (datum,) = datums
    assert datum.model_input.to_ints() == (student + answer)[:-1]
    n, k = datum.model_input.length, 3
    targets = datum.loss_fn_inputs["target_tokens"]
    weights = datum.loss_fn_inputs["weights"]
    assert targets.shape == [n, k] and weights.shape == [n, k]
    ids, probs = targets.tolist(), weights.tolist()
    norm = math.log(sum(math.exp(lp) for lp in ScriptedTopK.LOGPROBS))
    expected_p = [math.exp(lp - norm) for lp in ScriptedTopK.LOGPROBS]
    for position in range(n):
        t = position - (len(student) - 1)  # the answer token this position predicts
        if t < sdft.SKIP_FIRST:  # the prompt, and the first answer tokens
            assert probs[position] == [0.0] * k, position
            continue
        p = len(teacher_prompt) + t
        assert ids[position] == [7000 + p, 8000 + p, 9000 + p], position
        assert probs[position] == pytest.approx(expected_p), position
    assert stats["positions"] == len(answer) - sdft.SKIP_FIRST
    assert stats["entropy"] == pytest.approx(-sum(q * math.log(q) for q in expected_p))


def test_sdft_datums_are_accepted_by_the_sdk_types():
    datum, entropy, trained = sdft.topk_datum([1, 2], [3, 4, 5, 6, 7], [[(9, -0.1), (8, -2.5)]] * 5, 2)
    assert isinstance(datum, tinker.types.Datum)
    assert trained == 5 - sdft.SKIP_FIRST and entropy > 0
    # A position whose top-K the service did not score (None) trains nothing.
    datum, _, trained = sdft.topk_datum([1, 2], [3, 4, 5, 6, 7], [None] * 5, 2)
    assert trained == 0 and sum(datum.loss_fn_inputs["weights"].data) == 0


def test_distill_advantage_is_teacher_minus_student_on_answer_tokens_only():
    sequence = SimpleNamespace(tokens=[20, 21, 22], logprobs=[-0.5, -2.0, -1.0])
    datum = distill.distill_datum([10, 11, 12], sequence, [-0.25, -3.0, -1.0])
    assert datum.model_input.to_ints() == [10, 11, 12, 20, 21]
    assert datum.loss_fn_inputs["target_tokens"].data == [11, 12, 20, 21, 22]
    assert datum.loss_fn_inputs["logprobs"].data == [0.0, 0.0, -0.5, -2.0, -1.0]
    # The teacher finds token 20 likelier than the student did (+0.25) and token 21 less likely (-1.0).
    assert datum.loss_fn_inputs["advantages"].data == [0.0, 0.0, 0.25, -1.0, 0.0]


class ScriptedLogprobs:
    """A teacher whose logprob of every token it is asked about is -2.0; it keeps what it read."""

    def __init__(self):
        self.read = []

    async def compute_logprobs(self, prompt, prompt_logprobs_last_n):
        tokens = prompt.to_ints()
        self.read.append((tokens, prompt_logprobs_last_n))
        return [None] + [-7.0] * (len(tokens) - 1 - prompt_logprobs_last_n) + [-2.0] * prompt_logprobs_last_n


def test_the_teacher_reads_its_system_prompt_and_the_student_never_does(monkeypatch):
    monkeypatch.setattr(distill, "TEACHER_SYSTEM_PROMPT", "SECRETZQX rules")
    fmt = distill.family_format(tokenizer=None)
    row = {"prompt": "What is 2 + 3?", "metadata": {"answer": "5"}}
    args = SimpleNamespace(max_tokens=8)
    student = fmt.prompt(distill.as_messages(row["prompt"]), room=args.max_tokens).tokens
    groups = [answer_group(student, [31, 32]), answer_group(student, [])]
    teacher = ScriptedLogprobs()

    scored = asyncio.run(distill.teacher_logprobs(teacher, fmt, [row, row], groups, args))

    assert scored == [[[-2.0, -2.0]], [[]]]  # an empty answer asks the teacher nothing
    ((read, last_n),) = teacher.read
    assert last_n == 2 and read[-2:] == [31, 32]
    assert "SECRETZQX" in fmt.text(read) and "SECRETZQX" not in fmt.text(student)
    assert fmt.text(read).count("What is 2 + 3?") == 1
    # The system prompt the task gives the student comes first, the teacher's own after it.
    messages = distill.teacher_messages(row["prompt"])
    assert messages[0] == {"role": "system", "content": distill.SYSTEM_PROMPT + "\n\nSECRETZQX rules"}


def test_reverse_kl_is_the_students_logprob_minus_the_teachers_per_token():
    first = SimpleNamespace(tokens=[1, 2], logprobs=[-1.0, -3.0], stop_reason="stop")
    cut = SimpleNamespace(tokens=[1], logprobs=[-0.5], stop_reason="length")
    groups = [(None, SimpleNamespace(sequences=[first, cut]))]
    metrics = distill.answer_metrics(groups, [[[-2.0, -2.0], [-0.5]]], "eval")
    # Per token: (-1 - -2) + (-3 - -2) + (-0.5 - -0.5) = 0 over 3 tokens.
    assert metrics == {"eval/reverse_kl": 0.0, "eval/truncated": 0.5, "eval/sampled_tokens": 3}
    metrics = distill.answer_metrics(groups, [[[-4.0, -4.0], [-1.5]]], "train")
    assert metrics["train/reverse_kl"] == pytest.approx((3.0 + 1.0 + 1.0) / 3)


STUDENT = "name: d\ntitle: t\nsignal: teacher\ntask: math\nmodel: Qwen/Qwen3-4B-Instruct-2507\n"


@pytest.mark.parametrize(
    ("case", "text", "expected"),
    [
        (
            "distill without a teacher",
            STUDENT + "method: distill\n",
            "card.yaml:6:9: teacher: distill needs a teacher: add "
            "`teacher: Qwen/Qwen3-235B-A22B-Instruct-2507` (a model with the student's tokenizer) "
            "or a tinker:// checkpoint",
        ),
        (
            "prompt distillation with nothing to distil",
            STUDENT + "method: prompt_distill\n",
            "card.yaml:6:9: teacher: with neither a teacher nor a teacher_system_prompt the student "
            "learns its own answers: add `teacher: Qwen/Qwen3-235B-A22B-Instruct-2507` "
            "(a model with the student's tokenizer) or a tinker:// checkpoint",
        ),
        (
            "a teacher with another tokenizer",
            STUDENT + "method: distill\nteacher: Qwen/Qwen3.5-27B\n",
            "card.yaml:7:10: teacher: Qwen/Qwen3.5-27B reads other tokens than "
            "Qwen/Qwen3-4B-Instruct-2507: the teacher scores the student's own tokens, "
            "so they must share a tokenizer; use one of: "
            "Qwen/Qwen3-235B-A22B-Instruct-2507, Qwen/Qwen3-VL-235B-A22B-Instruct, Qwen/Qwen3-32B, "
            "Qwen/Qwen3-30B-A3B, ...",
        ),
        (
            "a misspelt teacher",
            STUDENT + "method: distill\nteacher: Qwen/Qwen3-32b\n",
            "card.yaml:7:10: teacher: unknown model 'Qwen/Qwen3-32b'; did you mean 'Qwen/Qwen3-32B'?; "
            "or give a tinker:// checkpoint",
        ),
        (
            "a teacher path that is no checkpoint",
            STUDENT + "method: distill\nteacher: tinker://run-1/final\n",
            "card.yaml:7:10: teacher: 'tinker://run-1/final' is not a checkpoint path: use "
            "tinker://<run>/weights/<name> or tinker://<run>/sampler_weights/<name>",
        ),
        (
            "a teacher for a method that has none",
            "name: d\ntitle: t\nsignal: demonstrations\ntask: chat\nmodel: Qwen/Qwen3-8B\nmethod: sdft\n"
            "teacher: Qwen/Qwen3-32B\n",
            "card.yaml:7:1: teacher: does not apply to method sdft (only to distill, prompt_distill); "
            "remove it",
        ),
        (
            "top-K beyond what a sampler returns",
            "name: d\ntitle: t\nsignal: demonstrations\ntask: chat\nmodel: Qwen/Qwen3-8B\nmethod: sdft\n"
            "topk: 5000\n",
            "card.yaml:7:7: topk: 5000 is greater than the maximum of 1024",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and "\n" not in value and ":" not in value else None,
)
def test_teacher_cards_are_validated(tmp_path, monkeypatch, case, text, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "card.yaml").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", "card.yaml"])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0] == expected


def test_a_teacher_checkpoint_or_a_model_of_the_students_tokenizer_is_valid(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for teacher in ("tinker://rtc-run-1/weights/sft-step-000009", "Qwen/Qwen3-8B"):
        (tmp_path / "card.yaml").write_text(
            STUDENT + f"method: distill\nteacher: {teacher}\n", encoding="utf-8"
        )
        result = CliRunner().invoke(cli, ["validate", "card.yaml"])
        assert result.exit_code == 0, result.output
    (tmp_path / "card.yaml").write_text(
        STUDENT + "method: prompt_distill\nteacher_system_prompt: Be terse.\n", encoding="utf-8"
    )
    assert CliRunner().invoke(cli, ["validate", "card.yaml"]).exit_code == 0


@pytest.mark.parametrize("method", ["distill", "prompt_distill", "sdft", "rewrite"])
def test_new_writes_a_distillation_card_that_validates(tmp_path, monkeypatch, method):
    monkeypatch.chdir(tmp_path)
    signal, task = ("teacher", "math") if "distill" in method else ("demonstrations", "chat")
    args = ["new", "--signal", signal, "--method", method, "--task", task, "--model", "Qwen/Qwen3-8B"]
    result = CliRunner().invoke(cli, [*args, "-o", "x.yaml"])
    assert result.exit_code == 0, result.output
    assert CliRunner().invoke(cli, ["validate", "x.yaml"]).stdout == "x.yaml: ok\n"
