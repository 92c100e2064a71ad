"""The pure parts of the generated loops, imported from generated/ and checked against tinker.types:
datum alignment, the rewrite filter, dataset checks, the resume position, GRPO advantages, the
DPO loss, and the chat format with a real tokenizer."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

tinker = pytest.importorskip("tinker")

GENERATED = Path(__file__).resolve().parents[2] / "generated"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"loop_{name.replace('-', '_')}", GENERATED / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sdft = load("sdft-tool-agents-nemotron")
rewrite = load("rewrite-chat-qwen3")
sft = load("sft-chat-qwen3")
grpo = load("grpo-math-qwen3")
dpo = load("dpo-chat-llama3")


def sft_datum(module, prompt: list[int], completion: list[int]):
    """A datum of `prompt` then `completion` (weight 1), built by a loop's own example_datum."""
    return module.example_datum(prompt + completion, [0.0] * len(prompt) + [1.0] * len(completion))


def test_example_datum_shifts_targets_and_weights():
    datum = sft_datum(sdft, [1, 2, 3], [4, 5, 6])
    assert isinstance(datum, tinker.types.Datum)
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5]
    assert datum.loss_fn_inputs["target_tokens"].data == [2, 3, 4, 5, 6]
    # Targets 2 and 3 are prompt tokens (weight 0); 4, 5, 6 are the completion (weight 1).
    assert datum.loss_fn_inputs["weights"].data == [0.0, 0.0, 1.0, 1.0, 1.0]


def test_rl_datum_puts_logprobs_and_advantages_on_completion_targets_only():
    sequence = SimpleNamespace(tokens=[20, 21], logprobs=[-0.5, -1.5])
    datum = grpo.rl_datum([10, 11, 12], None, sequence, advantage=0.75)
    assert datum.model_input.to_ints() == [10, 11, 12, 20]
    assert datum.loss_fn_inputs["target_tokens"].data == [11, 12, 20, 21]
    assert datum.loss_fn_inputs["logprobs"].data == [0.0, 0.0, -0.5, -1.5]
    assert datum.loss_fn_inputs["advantages"].data == [0.0, 0.0, 0.75, 0.75]
    n = datum.model_input.length
    assert all(
        len(datum.loss_fn_inputs[key].data) == n for key in ("target_tokens", "logprobs", "advantages")
    )
    # With the sampler's prompt logprobs (entry 0 has no context), prompt targets carry them.
    with_prompt = grpo.rl_datum([10, 11, 12], [None, -2.0, -3.0], sequence, advantage=0.75)
    assert with_prompt.loss_fn_inputs["logprobs"].data == [-2.0, -3.0, -0.5, -1.5]
    assert with_prompt.loss_fn_inputs["advantages"].data == [0.0, 0.0, 0.75, 0.75]


@pytest.mark.parametrize(
    ("answer", "ended", "expected"),
    [
        ("<tool_call>{}</tool_call> done", True, None),
        ("   \n", True, "empty"),
        (None, True, "empty"),  # the format found no answer (e.g. thinking never closed)
        ("a long answer that ran out", False, "cut off"),
        ("As the demonstration shows, call search.", True, "mentions the demonstration"),
        ("Following the reference, I call search.", True, "mentions the demonstration"),
        ("Like this example, I call search.", True, "mentions the demonstration"),
        ("An example of a search call follows.", True, None),  # "example" alone is fine
    ],
)
def test_rewrite_filter(answer, ended, expected):
    assert rewrite.rewrite_problem(rewrite.Reply(answer, "", ended)) == expected


@pytest.mark.parametrize("loop", [sdft, rewrite], ids=["sdft", "rewrite"])
def test_teacher_sees_the_task_and_the_demonstration(loop):
    row = {
        "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Find X."}],
        "completion": "DEMO TEXT",
    }
    messages = loop.teacher_messages(row)
    assert messages[0] == {"role": "system", "content": "S"}
    assert messages[-1]["role"] == "user"
    assert messages[-1]["content"].startswith("Find X.\n\n")
    assert "DEMO TEXT" in messages[-1]["content"]
    assert row["prompt"][-1]["content"] == "Find X."  # the row itself is not changed


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            ['{"prompt": "a", "completion": "b"}', "{not json"],
            "{path}:2: not valid JSON (Expecting property name enclosed in double quotes at column 2)",
        ),
        (['{"prompt": "a"}'], "{path}:1: missing key(s) completion; a row needs prompt, completion"),
        (['{"prompt": "a", "completion": 3}'], "{path}:1: 'completion' must be a str, got int"),
        (
            ['{"prompt": [], "completion": "b"}'],
            "{path}:1: 'prompt' must be a string or a non-empty list of chat messages",
        ),
        (
            ['{"prompt": [{"role": "robot", "content": "x"}], "completion": "b"}'],
            '{path}:1: prompt[0] must be {"role": one of system, user, assistant, tool, "content": str}',
        ),
        (["[1, 2]"], "{path}:1: expected a JSON object, got list"),
        (["", "  "], "{path}: no rows; expected one JSON object per line"),
    ],
)
def test_dataset_errors_name_file_and_line(tmp_path, lines, message):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(sft.DataError) as info:
        sft.load_dataset(str(path))
    assert str(info.value) == message.replace("{path}", str(path))


def test_dataset_keeps_unicode_line_separators_inside_strings(tmp_path):
    path = tmp_path / "d.jsonl"
    row = {"prompt": "a\u2028b", "completion": "c\x85d"}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    assert sft.load_dataset(str(path)) == [row]


def test_rows_for_step_is_a_deterministic_epoch_shuffle():
    rows = [{"i": i} for i in range(10)]
    first_epoch = [r["i"] for step in range(5) for r in sft.rows_for_step(rows, step, 2, seed=3)]
    assert sorted(first_epoch) == list(range(10))  # every row once per epoch
    # A resumed run asks for step k directly and gets what the uninterrupted run saw.
    assert sft.rows_for_step(rows, 7, 2, seed=3) == sft.rows_for_step(rows, 7, 2, seed=3)
    again = [r["i"] for step in range(5, 10) for r in sft.rows_for_step(rows, step, 2, seed=3)]
    assert sorted(again) == list(range(10)) and again != first_epoch  # a fresh shuffle each epoch
    assert sft.rows_for_step(rows, 0, 2, seed=4) != sft.rows_for_step(rows, 0, 2, seed=3)


def test_group_advantages():
    assert grpo.group_advantages([1.0, 1.0, 1.0], scale_by_std=False) is None  # no signal: skipped
    assert grpo.group_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=False) == [0.5, -0.5, -0.5, 0.5]
    scaled = grpo.group_advantages([1.0, 0.0, 0.0, 1.0], scale_by_std=True)
    assert scaled == pytest.approx([1.0, -1.0, -1.0, 1.0], rel=1e-5)
    assert sum(grpo.group_advantages([0.2, 0.9, 0.4], scale_by_std=False)) == pytest.approx(0.0)


def test_dpo_loss_matches_a_hand_computation():
    beta = 0.1
    policy = [-10.0, -12.0, -8.0, -7.0]  # chosen, rejected, chosen, rejected
    reference = [-11.0, -11.0, -8.0, -8.0]
    stats = dpo.dpo_stats(policy, reference, beta)
    margins = [beta * ((-10 + 11) - (-12 + 11)), beta * ((-8 + 8) - (-7 + 8))]  # 0.2, -0.1
    expected = sum(-math.log(1 / (1 + math.exp(-m))) for m in margins) / 2
    assert stats["loss"] == pytest.approx(expected)
    assert stats["accuracy"] == 0.5
    assert stats["margin"] == pytest.approx(0.05)
    assert stats["chosen_reward"] == pytest.approx((0.1 + 0.0) / 2)
    assert stats["rejected_reward"] == pytest.approx((-0.1 + 0.1) / 2)


def test_dpo_custom_loss_and_its_gradient():
    torch = pytest.importorskip("torch")
    datums = [sft_datum(dpo, [1, 2], [3, 4]), sft_datum(dpo, [1, 2], [5, 6])]
    logprobs = [
        torch.tensor([-9.0, -1.0, -2.0], requires_grad=True),
        torch.tensor([-9.0, -3.0, -3.0], requires_grad=True),
    ]
    loss, metrics = dpo.dpo_loss([-4.0, -5.0], beta=0.5)(datums, logprobs)
    # policy sums: chosen -3, rejected -6 (prompt target excluded); margin = 0.5 * ((-3 + 4) - (-6 + 5)) = 1
    assert loss.item() == pytest.approx(math.log1p(math.exp(-1.0)))
    assert metrics["dpo/accuracy:mean"] == 1.0
    loss.backward()
    assert logprobs[0].grad[0].item() == 0.0  # no gradient through the prompt position
    assert logprobs[0].grad[1].item() < 0 < logprobs[1].grad[1].item()  # raise chosen, lower rejected


def test_run_log_forgets_steps_a_resume_redoes(tmp_path):
    log = sft.RunLog(str(tmp_path / "run" / "metrics.jsonl"))
    for step in range(5):
        log.write({"step": step, "split": "train", "loss": 1.0})
    log.checkpoint({"step": 1, "name": "a", "path": "tinker://r/weights/a"})
    log.checkpoint({"step": 3, "name": "b", "path": "tinker://r/weights/b"})
    assert log.find_checkpoint("latest")["step"] == 3
    assert log.find_checkpoint("tinker://r/weights/a")["step"] == 1
    with pytest.raises(SystemExit, match="is not listed in"):
        log.find_checkpoint("tinker://r/weights/zzz")
    log.forget_after(1)
    steps = [json.loads(line)["step"] for line in log.metrics.read_text().splitlines()]
    assert steps == [0, 1]


def test_system_prompt_is_added_unless_the_row_has_one(monkeypatch):
    monkeypatch.setattr(grpo, "SYSTEM_PROMPT", "Be brief.")
    assert grpo.as_messages("q") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "q"},
    ]
    own = [{"role": "system", "content": "Mine"}, {"role": "user", "content": "q"}]
    assert grpo.as_messages(own) == own


def test_grade_turns_a_verifier_crash_into_zero(monkeypatch):
    def broken(completion, metadata):
        raise RuntimeError("bug")

    monkeypatch.setattr(grpo, "verify", broken)
    verdict = grpo.grade((grpo.Reply("x", "", True), {}, False))
    assert verdict["reward"] == 0.0 and verdict["verifier_error"] == 1.0


def test_math_verifier_is_inlined_and_scores():
    assert grpo.verify("so \\boxed{42}", {"answer": "42"})["reward"] == 1.0
    assert grpo.verify("so \\boxed{41}", {"answer": "42"})["reward"] == 0.0


def test_loss_per_token_divides_loss_sum_by_weights():
    datums = [sft_datum(sft, [1, 2], [3, 4, 5]), sft_datum(sft, [1], [2])]  # 3 + 1 weighted tokens
    output = SimpleNamespace(metrics={"loss:sum": 8.0})
    assert sft.loss_per_token(output, datums) == 2.0
