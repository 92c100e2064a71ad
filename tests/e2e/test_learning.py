"""Each method learns: numbers from the loop's own metrics log, on the tiny model, with fixed seeds."""

from __future__ import annotations

from e2e_kit import train_records, write_jsonl


def test_sft_loss_falls_by_half(run_loop, tmp_path):
    data = write_jsonl(
        tmp_path / "sft.jsonl",
        [
            {"prompt": "What is the capital of France?", "completion": "Paris."},
            {"prompt": "Name a primary colour.", "completion": "Blue."},
        ],
    )
    result = run_loop(
        "sft-chat-qwen3",
        "--data",
        data,
        "--steps",
        "25",
        "--batch-size",
        "2",
        "--lr",
        "2e-2",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--max-tokens",
        "4",
    )
    assert result.returncode == 0, result.stderr
    losses = [r["train/loss"] for r in train_records(tmp_path / "runs" / "sft-chat-qwen3" / "metrics.jsonl")]
    assert len(losses) == 25
    assert losses[-1] <= losses[0] / 2, losses


def test_rewrite_loss_falls(run_loop, tmp_path):
    data = write_jsonl(
        tmp_path / "demos.jsonl",
        [
            {"prompt": "Weather in Oslo?", "completion": '<tool_call>{"name": "weather"}</tool_call> Rain.'},
            {"prompt": "Add 2 and 3.", "completion": '<tool_call>{"name": "calculator"}</tool_call> 5.'},
        ],
    )
    result = run_loop(
        "rewrite-chat-qwen3",
        "--data",
        data,
        "--temperature",
        "0.5",  # as the sdft card this test used before had: rewrites steady enough to learn
        "--steps",
        "15",
        "--group-size",
        "2",
        "--prompts-per-step",
        "2",
        "--max-tokens",
        "8",
        "--lr",
        "2e-2",
        "--eval-every",
        "0",
        "--save-every",
        "0",
    )
    assert result.returncode == 0, result.stderr
    records = train_records(tmp_path / "runs" / "rewrite-chat-qwen3" / "metrics.jsonl")
    first, last = records[0]["train/loss"], records[-1]["train/loss"]
    assert last < 0.7 * first, [r["train/loss"] for r in records]


def test_dpo_prefers_chosen_and_the_margin_grows(run_loop, tmp_path):
    pairs = [
        {"prompt": "Greet me.", "chosen": "Hello, nice to meet you!", "rejected": "Go away."},
        {"prompt": "Is water wet?", "chosen": "Yes, in everyday terms.", "rejected": "Whatever, who cares."},
        {"prompt": "Say thanks.", "chosen": "Thank you very much!", "rejected": "No."},
        {"prompt": "Capital of Italy?", "chosen": "Rome.", "rejected": "I refuse to answer."},
    ]
    data = write_jsonl(tmp_path / "pairs.jsonl", pairs)
    result = run_loop(
        "dpo-chat-llama3",
        "--data",
        data,
        "--steps",
        "12",
        "--batch-size",
        "4",
        "--lr",
        "1e-2",
        "--beta",
        "0.5",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--max-tokens",
        "4",
    )
    assert result.returncode == 0, result.stderr
    records = train_records(tmp_path / "runs" / "dpo-chat-llama3" / "metrics.jsonl")
    assert records[-1]["train/accuracy"] >= 0.9, records[-1]
    assert records[-1]["train/margin"] > records[0]["train/margin"] + 0.5, [
        r["train/margin"] for r in records
    ]
    assert records[-1]["train/loss"] < records[0]["train/loss"]


def test_grpo_raises_the_reward_of_a_toy_task(run_loop, tmp_path):
    # Reward 1 when the completion's last line holds a digit: the tiny model finds it by chance
    # about a quarter of the time, so every group has a signal to learn from.
    words = ["apple", "river", "cloud", "stone", "green", "quick", "light", "music"]
    data = write_jsonl(
        tmp_path / "toy.jsonl",
        [{"prompt": f"Reply with anything after {w}.", "metadata": {"pattern": ".*[0-9].*"}} for w in words],
    )
    result = run_loop(
        "grpo-match-deepseek",
        "--data",
        data,
        "--steps",
        "12",
        "--group-size",
        "8",
        "--prompts-per-step",
        "4",
        "--max-tokens",
        "4",
        "--lr",
        "2e-2",
        "--eval-every",
        "0",
        "--save-every",
        "0",
        "--grade-truncated",  # 4 tokens rarely reach the end of a turn: grade what is there
    )
    assert result.returncode == 0, result.stderr
    rewards = [
        r["train/reward"] for r in train_records(tmp_path / "runs" / "grpo-match-deepseek" / "metrics.jsonl")
    ]
    early, late = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert early < 0.5 and late > early + 0.4, rewards
