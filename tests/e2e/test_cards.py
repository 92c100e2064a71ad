"""Every card in recipes/ runs its generated loop for a few steps on its example data through the
real SDK and rtc serve, exits 0, and leaves the metrics and checkpoints a user expects: each against
the tiny model of its own family (its real vocabulary and special tokens, so the loop renders, trains,
stops and parses in the family's format), and one against a stand-in model of another tokenizer (the
loop then uses that model's own chat template)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import yaml
from e2e_kit import DATA, GENERATED, ROOT, read_jsonl, write_jsonl

CARDS = sorted((ROOT / "recipes").glob("*.yaml"))
# What each card's loop says it renders with, against its family's model.
FORMAT_NAME = {
    "Qwen/Qwen3-4B-Instruct-2507": "tml-renderers Qwen3.instruct",
    "Qwen/Qwen3-8B": "tml-renderers Qwen3, thinking on",
    "openai/gpt-oss-20b": "tml-renderers GptOss.medium",
    "deepseek-ai/DeepSeek-V3.1": "tml-renderers DeepSeekV31, thinking off",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "tml-renderers Nemotron3, thinking on",
    "meta-llama/Llama-3.1-8B-Instruct": "the chat template of meta-llama/Llama-3.1-8B-Instruct",
}

# Small sizes so every loop runs in seconds on the tiny model; the loop's code paths are all used.
SIZES = {
    "grpo": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8"],
    "sdft": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8", "--topk", "5"],
    "rewrite": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8"],
    "distill": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8"],
    "prompt_distill": ["--batch-size", "2", "--max-tokens", "8"],
    "sft": ["--batch-size", "4", "--max-tokens", "8"],
    "dpo": ["--batch-size", "2", "--max-tokens", "8"],
    "reward_model": ["--batch-size", "2", "--max-tokens", "8"],
}
# What a card needs beyond its method's sizes: a scorer for GRPO against a reward model (the base
# model as a zero-shot judge here; tests/e2e/test_rewards.py chains a trained one), and a judge that
# is reached (samples cut at 8 tokens are graded) in a few tokens.
EXTRA = {
    "rlhf-3-grpo-qwen3": ["--reward-model", "Qwen/Qwen3-4B-Instruct-2507"],
    "grpo-rubric-qwen3": ["--grade-truncated", "--judge-max-tokens", "8"],
}
# Tool-agents cards: the first rows of the held-out set only (transcripts are long); the tool loops
# (grpo on tool-agents) also get their corpus and one episode per held-out question at eval.
TOOL_ARGS = ["--eval-samples", "1", "--max-turns", "3"]
TOOL_EVAL_ROWS = {"grpo": 4, "sft": 1, "sdft": 4}
# A tool trace is several turns of several hundred tokens (the tools are declared in the prompt), and
# tiny-qwen3 scores Qwen3's whole 152k vocabulary per token: one trace per SFT step.
TOOL_SIZES = {"sft": ["--batch-size", "1", "--max-tokens", "8"]}
TOOL_KEYS = {
    "train/turns",
    "train/tool_calls",
    "train/tool_call_rate",
    "train/malformed_rate",
    "train/answered",
}
KEYS = {
    "grpo": {"train/reward", "train/accuracy", "train/skipped_frac", "train/sampled_tokens"},
    "sdft": {"train/teacher_entropy", "train/answer_tokens", "train/truncated"},
    "rewrite": {"train/fallback_frac", "train/fallbacks"},
    "distill": {"train/reverse_kl", "train/sampled_tokens", "train/truncated"},
    "prompt_distill": {"train/n_tokens"},
    "sft": {"train/n_tokens"},
    "dpo": {"train/accuracy", "train/margin", "train/chosen_reward", "train/rejected_reward"},
    "reward_model": {"train/accuracy", "train/margin", "train/chosen_score", "train/rejected_score"},
}
# Every train record: the step, the loss, the learning rate, the step's time; and the optimizer's
# own metrics when there was an update (GRPO skips it when every group had equal rewards).
EVAL_ROWS = 8
COMMON = {"step", "split", "train/loss", "train/n_datums", "optim/lr", "time/step"}


@pytest.mark.parametrize("card", CARDS, ids=[c.stem for c in CARDS])
def test_card_trains_in_its_familys_format(run_loop, family_server, tmp_path, card):
    spec = yaml.safe_load(card.read_text())
    url = family_server(spec["model"])
    data, extra = DATA / spec["data"]["train"].split("/")[-1], []
    if spec["method"] == "prompt_distill":
        data, extra = a_teacher_that_answers(run_loop, tmp_path, spec, url)
    result = check_card_run(run_loop, tmp_path, spec, url=url, data=data, extra=extra)
    assert f"chat format: {FORMAT_NAME[spec['model']]}" in result.stdout, result.stdout
    if spec["signal"] == "teacher":
        assert "teacher: " in result.stdout  # the teacher it sampled, named


def a_teacher_that_answers(run_loop, tmp_path, spec: dict, url: str) -> tuple[Path, list[str]]:
    """Prompt distillation keeps only the teacher's right answers, and a random tiny teacher gets none
    right. So first train the family's tiny model (SFT, on the same server) to answer every prompt of
    the card, as its teacher reads them, with one word; the card's prompts are then graded by that
    word, and the card runs with that checkpoint as its teacher (--teacher checkpoints.jsonl)."""
    loop_spec = importlib.util.spec_from_file_location("teacher_card", GENERATED / f"{spec['name']}.py")
    loop = importlib.util.module_from_spec(loop_spec)
    sys.modules[loop_spec.name] = loop
    loop_spec.loader.exec_module(loop)
    rows = read_jsonl(DATA / spec["data"]["train"].split("/")[-1])
    sft = write_jsonl(
        tmp_path / "teacher-sft.jsonl",
        [{"prompt": loop.teacher_messages(row["prompt"]), "completion": "Paris"} for row in rows],
    )
    result = run_loop(
        "sft-chat-qwen3",
        *("--model", spec["model"], "--data", sft, "--steps", "12", "--batch-size", "8", "--lr", "1e-2"),
        *("--eval-every", "0", "--save-every", "0", "--max-tokens", "8", "--out", "teacher"),
        url=url,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    graded = write_jsonl(tmp_path / "paris.jsonl", [{**row, "metadata": {"answer": "Paris"}} for row in rows])
    return graded, ["--teacher", tmp_path / "runs" / "teacher" / "checkpoints.jsonl"]


def test_a_stand_in_model_is_rendered_with_its_own_chat_template(run_loop, tmp_path):
    spec = yaml.safe_load((ROOT / "recipes" / "grpo-json-gpt-oss.yaml").read_text())
    result = check_card_run(run_loop, tmp_path, spec)  # the `tiny` server: ChatML, not harmony
    assert "chat format: rtc/tiny (its chat template)" in result.stdout, result.stdout
    assert "not a model of this format" in result.stdout


def check_card_run(run_loop, tmp_path, spec: dict, url: str | None = None, data=None, extra=()):
    extra = list(extra)
    # At most EVAL_ROWS held-out prompts: a teacher scores each eval answer with its own request.
    eval_rows = read_jsonl(DATA / spec["data"]["eval"].split("/")[-1])[:EVAL_ROWS]
    chained = spec.get("init_from", "").endswith("checkpoints.jsonl")
    if chained:  # the second card of a chain: run the first, in the same directory
        first = yaml.safe_load((ROOT / "recipes" / f"{Path(spec['init_from']).parent.name}.yaml").read_text())
        check_card_run(run_loop, tmp_path, first, url)
    sizes, timeout = SIZES[spec["method"]], 240
    if spec["task"] == "tool-agents":  # long transcripts: fewer rows, more time
        sizes, timeout = TOOL_SIZES.get(spec["method"], sizes), 600
        eval_rows = eval_rows[: TOOL_EVAL_ROWS[spec["method"]]]
    tool_loop = spec["task"] == "tool-agents" and spec["method"] == "grpo"
    if tool_loop:
        extra += [*TOOL_ARGS, "--corpus", DATA / spec["corpus"].split("/")[-1]]
    result = run_loop(
        spec["name"],
        "--data",
        data or DATA / spec["data"]["train"].split("/")[-1],
        "--eval-data",
        write_jsonl(tmp_path / f"{spec['name']}.eval.jsonl", eval_rows),
        "--steps",
        "3",
        "--eval-every",
        "2",
        "--save-every",
        "2",
        *sizes,
        *extra,
        *EXTRA.get(spec["name"], []),
        url=url,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    if chained:
        assert "starting from tinker://" in result.stdout, result.stdout
    run_dir = tmp_path / "runs" / spec["name"]
    records = read_jsonl(run_dir / "metrics.jsonl")
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train] == [0, 1, 2]
    assert [r["step"] for r in evals] == [0, 2, 3]  # before steps 0 and 2, and after the last
    keys = COMMON | KEYS[spec["method"]] | (TOOL_KEYS if tool_loop else set())
    for record in train:
        assert keys <= set(record), sorted(record)
        assert ("optim/grad_norm" in record) == (record["train/loss"] is not None), sorted(record)
    for record in evals:
        assert all(key == "step" or key == "split" or key.startswith("eval/") for key in record), record
    checkpoints = read_jsonl(run_dir / "checkpoints.jsonl")
    assert [c["step"] for c in checkpoints] == [1, 2]
    if spec["method"] == "reward_model":  # what a GRPO run scores with
        assert all("/sampler_weights/" in c["sampler_path"] for c in checkpoints)
    assert all(c["path"].startswith("tinker://") for c in checkpoints)
    assert "sample from the trained weights:" in result.stdout
    return result
