"""The cost before the run: `--dry-run` (and `rtc explain`, the same lines) counts the tokens the whole
run sends, equal to a hand count made here from tml-renderers' own tokens, and prices them with the
dated table of catalog/prices.yaml."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import rtc.cli
from rtc.catalog import load_catalog, load_prices

tml = pytest.importorskip("tml_renderers")
from tml_renderers import chat, renderers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"

# Rows bring their own system message, so the loop adds none (SYSTEM_PROMPT) and the hand count
# renders exactly the messages written here.
SFT_ROWS = [
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}], "completion": a}
    for q, a in [
        ("Capital of France?", "Paris."),
        ("Two plus two?", "Four, since 2 + 2 = 4."),
        ("Name a colour.", "Blue."),
        ("What is rain?", "Water falling from clouds."),
    ]
]
SFT_EVAL = [
    {
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}],
        "completion": "Hi.",
    },
    {
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sky?"}],
        "completion": "Blue.",
    },
]
MATH_ROWS = [
    {
        "prompt": [
            {"role": "system", "content": "Solve it."},
            {"role": "user", "content": f"What is {a} + {b}?"},
        ],
        "metadata": {"answer": str(a + b)},
    }
    for a, b in [(1, 2), (30, 12), (7, 700)]
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def sft_inputs(renderer, messages: list[dict]) -> int:
    """Input tokens of a conversation's trained examples: each example's tokens but the last (a datum)."""
    examples = renderer.render_for_sft(chat.OpenAIMessage.from_oss_messages(messages))
    return sum(sum(len(span.span.tokens) for span in ex.input_token_spans) - 1 for ex in examples)


def prompt_length(renderer, messages: list[dict]) -> int:
    spans, _ = renderer.render_for_completion(chat.OpenAIMessage.from_oss_messages(messages))
    return sum(len(span.span.tokens) for span in spans)


def dry_run(loop: str, *args: object) -> str:
    result = subprocess.run(
        [sys.executable, str(GENERATED / f"{loop}.py"), "--dry-run", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def cost_section(output: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("cost of the whole run"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("   ")), len(lines))
    return lines[start:end]


def phases(section: list[str]) -> dict[str, tuple[int, int, int]]:
    """{phase: (prefill, sample, train)} from the table --dry-run prints."""
    out = {}
    for line in section:
        match = re.fullmatch(
            r"   (\S+(?: \S+)?) +prefill +([\d,]+) \| sample <= +([\d,]+) \| train (?:<=| ) +([\d,]+)", line
        )
        if match:
            out[match[1]] = tuple(int(match[i].replace(",", "")) for i in (2, 3, 4))
    return out


def test_sft_tokens_equal_a_hand_count_and_explain_shows_the_same_lines(tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "train.jsonl", SFT_ROWS)
    held = write_jsonl(tmp_path / "eval.jsonl", SFT_EVAL)
    # 4 steps x 2 rows = two whole epochs of the 4 rows; evals at steps 0 and 3 and after the last.
    output = dry_run(
        "sft-chat-qwen3", "--data", data, "--eval-data", held, "--steps", 4, "--batch-size", 2,
        "--eval-every", 3, "--max-tokens", 16,
    )  # fmt: skip
    renderer = renderers.Qwen3.instruct()  # the card's model, Qwen3-4B-Instruct-2507
    demo = [
        sft_inputs(renderer, [*r["prompt"], {"role": "assistant", "content": r["completion"]}])
        for r in SFT_ROWS
    ]
    held_demo = [
        sft_inputs(renderer, [*r["prompt"], {"role": "assistant", "content": r["completion"]}])
        for r in SFT_EVAL
    ]
    closing = prompt_length(renderer, SFT_EVAL[0]["prompt"])
    assert phases(cost_section(output)) == {
        "train steps": (0, 0, 2 * sum(demo)),
        "evals": (3 * sum(held_demo), 0, 0),
        "closing sample": (closing, 16, 0),
        "whole run": (3 * sum(held_demo) + closing, 16, 2 * sum(demo)),
    }
    # Qwen3-4B-Instruct-2507 has no price in the table: tokens only, said so.
    assert "Qwen/Qwen3-4B-Instruct-2507" not in load_prices().prices
    assert (
        cost_section(output)[-1] == "   price of Qwen/Qwen3-4B-Instruct-2507: not in that table; tokens only"
    )

    # rtc explain on a card that names this data and these settings prints the very same lines.
    (tmp_path / "card.yaml").write_text(
        "name: sft-chat-qwen3\ntitle: Counted\nsignal: demonstrations\nmethod: sft\ntask: chat\n"
        "model: Qwen/Qwen3-4B-Instruct-2507\nsteps: 4\nbatch_size: 2\neval_every: 3\n"
        "sampling: {max_tokens: 16}\ndata:\n  train: train.jsonl\n  eval: eval.jsonl\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    explained = CliRunner().invoke(rtc.cli.cli, ["explain", "card.yaml"])
    assert explained.exit_code == 0, explained.output
    assert cost_section(explained.stdout) == cost_section(output)


def test_grpo_tokens_and_cost_equal_a_hand_count(tmp_path):
    data = write_jsonl(tmp_path / "train.jsonl", MATH_ROWS)
    held = write_jsonl(tmp_path / "eval.jsonl", MATH_ROWS[:2])
    # 3 steps x 2 prompts = two epochs of the 3 rows; 4 samples per prompt; evals at 0 and 2 and at the end.
    output = dry_run(
        "grpo-math-qwen3", "--data", data, "--eval-data", held, "--steps", 3, "--prompts-per-step", 2,
        "--group-size", 4, "--eval-every", 2, "--max-tokens", 32,
    )  # fmt: skip
    renderer = renderers.Qwen3()  # Qwen3-8B, thinking on (the card's default)
    prompts = [prompt_length(renderer, row["prompt"]) for row in MATH_ROWS]
    eval_samples = 4  # the loop's EVAL_SAMPLES
    train = (2 * sum(prompts), 2 * 3 * 4 * 32, 2 * sum(4 * (p + 32 - 1) for p in prompts))
    evals = (3 * sum(prompts[:2]), 3 * 2 * eval_samples * 32, 0)
    closing = (prompts[0], 32, 0)
    whole = tuple(a + b + c for a, b, c in zip(train, evals, closing, strict=True))
    section = cost_section(output)
    assert phases(section) == {
        "train steps": train,
        "evals": evals,
        "closing sample": closing,
        "whole run": whole,
    }

    # The price is the table's, for the card's model, named with its source and dates.
    table = load_prices()
    price = table.prices["Qwen/Qwen3-8B"]
    assert section[-3] == f"   prices: {table.describe()}"
    assert table.effective in section[-3] and table.source in section[-3]
    assert section[-2] == (
        "   price of Qwen/Qwen3-8B per million tokens: "
        f"prefill ${price.prefill:g}, sample ${price.sample:g}, train ${price.train:g}"
    )
    dollars = [whole[0] * price.prefill / 1e6, whole[1] * price.sample / 1e6, whole[2] * price.train / 1e6]
    assert section[-1] == (
        f"   estimated cost: at most ${sum(dollars):,.4f} "
        f"(prefill ${dollars[0]:,.4f} + sample ${dollars[1]:,.4f} + train ${dollars[2]:,.4f})"
    )
    # Another --model than the card's: its price is not this file's to know.
    other = dry_run("grpo-math-qwen3", "--data", data, "--steps", 1, "--model", "Qwen/Qwen3-32B")
    assert cost_section(other)[-1] == "   price of Qwen/Qwen3-32B: not in that table; tokens only"


def load_loop(name: str):
    spec = importlib.util.spec_from_file_location(f"cost_{name.replace('-', '_')}", GENERATED / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CharFormat:
    """A stand-in format with one token per character of the rendered text: DPO's card (Llama 3) has no
    tokenizer offline, and its schedule, not the tokenizer, is what this test counts."""

    name = "characters"

    def examples(self, messages: list[dict]) -> list[tuple[list[int], list[float]]]:
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return [([ord(c) for c in text], [1.0] * len(text))]

    def prompt(self, messages: list[dict], room: int | None = 0):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"
        return SimpleNamespace(tokens=[ord(c) for c in text])


def test_dpo_counts_pairs_twice_per_step_and_each_reference_sequence_once():
    dpo = load_loop("dpo-chat-llama3")
    rows = dpo.Rows(
        [{"prompt": f"Q{i}?", "chosen": "good answer", "rejected": "bad"} for i in range(3)],
        ["d:1", "d:2", "d:3"],
    )
    eval_rows = dpo.Rows([{"prompt": "E?", "chosen": "yes", "rejected": "no!"}], ["e:1"])
    args = SimpleNamespace(steps=3, batch_size=2, seed=0, eval_every=2, max_tokens=8, model=dpo.BASE_MODEL)
    fmt = CharFormat()

    def length(row, answer):  # the whole sequence of a pair's answer, as CharFormat renders it
        return len(
            "".join(f"<{m['role']}>{m['content']}" for m in dpo.conversation(row["prompt"], row[answer]))
        )

    pair = {id(r): length(r, "chosen") + length(r, "rejected") for r in [*rows, *eval_rows]}
    used = [r for step in range(3) for r in dpo.rows_for_step(rows, step, 2, 0)]  # 6 = two epochs of 3
    assert len(used) == 6 and {id(r) for r in used} == {id(r) for r in rows}
    trained = sum(pair[id(r)] - 2 for r in used)  # a datum's inputs: its tokens but the last
    evals = 3  # steps 0 and 2, and after the last
    got = dpo.run_tokens(fmt, rows, eval_rows, args)
    assert (got["train steps"].prefill, got["train steps"].train) == (trained, trained)
    assert got["evals"].prefill == evals * (pair[id(eval_rows[0])] - 2)
    # The reference scores each distinct sequence once over the whole run (Reference caches it).
    assert got["reference"].prefill == sum(pair[id(r)] for r in [*rows, *eval_rows])
    assert sum(t.sample for t in got.values()) == 0


def test_every_priced_model_is_in_the_catalog_and_the_table_is_dated():
    table = load_prices()
    assert set(table.prices) <= set(load_catalog().models)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table.effective) and re.fullmatch(
        r"\d{4}-\d{2}-\d{2}", table.read
    )
    assert table.source.startswith("https://")
    for price in table.prices.values():
        assert 0 < price.prefill <= price.sample and 0 < price.train


def test_distill_counts_the_students_samples_and_the_teachers_scoring(tmp_path):
    """On-policy distillation: each answer (at --max-tokens) is sampled by the student, read again by
    the teacher after its own prompt (compute_logprobs), and trained after the student's prompt; an
    eval samples EVAL_SAMPLES answers per held-out prompt and has the teacher score each."""
    data = write_jsonl(tmp_path / "train.jsonl", MATH_ROWS)
    held = write_jsonl(tmp_path / "eval.jsonl", MATH_ROWS[:2])
    # 3 steps x 2 prompts = two epochs of the 3 rows; 4 answers per prompt; evals at 0, 2 and the end.
    output = dry_run(
        "distill-math-qwen3", "--data", data, "--eval-data", held, "--steps", 3, "--prompts-per-step", 2,
        "--group-size", 4, "--eval-every", 2, "--max-tokens", 32,
    )  # fmt: skip
    renderer = renderers.Qwen3.instruct()  # the card's student, Qwen3-4B-Instruct-2507
    # The card gives the teacher no system prompt of its own: it reads the student's prompt.
    assert load_loop("distill-math-qwen3").TEACHER_SYSTEM_PROMPT is None
    prompts = [prompt_length(renderer, row["prompt"]) for row in MATH_ROWS]
    answer, group, eval_samples = 32, 4, 4  # eval_samples: the loop's EVAL_SAMPLES
    train = (
        2 * sum(p + group * (p + answer) for p in prompts),  # the student's request, the teacher's reads
        2 * 3 * group * answer,
        2 * sum(group * (p + answer - 1) for p in prompts),
    )
    evals = (3 * sum(p + eval_samples * (p + answer) for p in prompts[:2]), 3 * 2 * eval_samples * answer, 0)
    closing = (prompts[0], answer, 0)
    whole = tuple(a + b + c for a, b, c in zip(train, evals, closing, strict=True))
    assert phases(cost_section(output)) == {
        "train steps": train,
        "evals": evals,
        "closing sample": closing,
        "whole run": whole,
    }
