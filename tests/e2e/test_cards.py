"""Every card in recipes/ runs its generated loop for a few steps on its example data through the
real SDK and rtc serve, exits 0, and leaves the metrics and checkpoints a user expects: each against
the tiny model of its own family (its real vocabulary and special tokens, so the loop renders, trains,
stops and parses in the family's format), and one against a stand-in model of another tokenizer (the
loop then uses that model's own chat template)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from e2e_kit import DATA, ROOT, read_jsonl

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
    "sdft": ["--group-size", "2", "--prompts-per-step", "2", "--max-tokens", "8"],
    "sft": ["--batch-size", "4", "--max-tokens", "8"],
    "dpo": ["--batch-size", "2", "--max-tokens", "8"],
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
    "sdft": {"train/fallback_frac", "train/fallbacks"},
    "sft": {"train/n_tokens"},
    "dpo": {"train/accuracy", "train/margin", "train/chosen_reward", "train/rejected_reward"},
}
# Every train record: the step, the loss, the learning rate, the step's time; and the optimizer's
# own metrics when there was an update (GRPO skips it when every group had equal rewards).
COMMON = {"step", "split", "train/loss", "train/n_datums", "optim/lr", "time/step"}


@pytest.mark.parametrize("card", CARDS, ids=[c.stem for c in CARDS])
def test_card_trains_in_its_familys_format(run_loop, family_server, tmp_path, card):
    spec = yaml.safe_load(card.read_text())
    result = check_card_run(run_loop, tmp_path, spec, url=family_server(spec["model"]))
    assert f"chat format: {FORMAT_NAME[spec['model']]}" in result.stdout, result.stdout


def test_a_stand_in_model_is_rendered_with_its_own_chat_template(run_loop, tmp_path):
    spec = yaml.safe_load((ROOT / "recipes" / "grpo-json-gpt-oss.yaml").read_text())
    result = check_card_run(run_loop, tmp_path, spec)  # the `tiny` server: ChatML, not harmony
    assert "chat format: rtc/tiny (its chat template)" in result.stdout, result.stdout
    assert "not a model of this format" in result.stdout


def check_card_run(run_loop, tmp_path, spec: dict, url: str | None = None):
    extra = []
    eval_data = DATA / spec["data"]["eval"].split("/")[-1]
    chained = spec.get("init_from", "").endswith("checkpoints.jsonl")
    if chained:  # the second card of a chain: run the first, in the same directory
        first = yaml.safe_load((ROOT / "recipes" / f"{Path(spec['init_from']).parent.name}.yaml").read_text())
        check_card_run(run_loop, tmp_path, first, url)
    sizes, timeout = SIZES[spec["method"]], 240
    if spec["task"] == "tool-agents":  # long transcripts: fewer rows, more time
        sizes, timeout = TOOL_SIZES.get(spec["method"], sizes), 600
        rows = eval_data.read_text(encoding="utf-8").splitlines()[: TOOL_EVAL_ROWS[spec["method"]]]
        eval_data = tmp_path / f"{spec['name']}.eval.jsonl"
        eval_data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    if spec["task"] == "tool-agents" and spec["method"] == "grpo":
        extra = [*TOOL_ARGS, "--corpus", DATA / spec["corpus"].split("/")[-1]]
    result = run_loop(
        spec["name"],
        "--data",
        DATA / spec["data"]["train"].split("/")[-1],
        "--eval-data",
        eval_data,
        *extra,
        "--steps",
        "3",
        "--eval-every",
        "2",
        "--save-every",
        "2",
        *sizes,
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
    keys = COMMON | KEYS[spec["method"]] | (TOOL_KEYS if extra else set())
    for record in train:
        assert keys <= set(record), sorted(record)
        assert ("optim/grad_norm" in record) == (record["train/loss"] is not None), sorted(record)
    for record in evals:
        assert all(key == "step" or key == "split" or key.startswith("eval/") for key in record), record
    checkpoints = read_jsonl(run_dir / "checkpoints.jsonl")
    assert [c["step"] for c in checkpoints] == [1, 2]
    assert all(c["path"].startswith("tinker://") for c in checkpoints)
    assert "sample from the trained weights:" in result.stdout
    return result
