"""Bad input never costs a run: every flag, file and row a loop can be handed wrongly is refused with a
clear message before step 0 (before connecting where it can be), and nothing is trained or logged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from e2e_kit import DATA, GENERATED, loop_env, write_jsonl

SFT = GENERATED / "sft-chat-qwen3.py"
NOWHERE = "http://127.0.0.1:9"  # checks that come before connecting never reach it


def run(loop, tmp_path, *args, url=NOWHERE, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(loop), *map(str, args)],
        cwd=tmp_path,
        env=loop_env(url),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_refused_before_training(result, tmp_path, message: str, code: int = 2) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert "step    0" not in result.stdout
    for metrics in tmp_path.rglob("metrics.jsonl"):
        assert not metrics.read_text().strip()  # no step was logged


@pytest.mark.parametrize(
    ("out", "shown"), [("a/b", "'a/b'"), ("../x", "'../x'"), ("my run", "'my run'"), ("", "''")]
)
def test_an_out_name_no_checkpoint_could_take_is_refused(tmp_path, out, shown):
    result = run(SFT, tmp_path, "--data", DATA / "sft-chat.jsonl", "--out", out)
    assert_refused_before_training(result, tmp_path, f"--out {shown} names the run's checkpoints")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused(tmp_path, value):
    result = run(SFT, tmp_path, "--data", DATA / "sft-chat.jsonl", f"--lr={value}")
    assert_refused_before_training(result, tmp_path, "--lr must be a finite number")


def test_a_log_that_cannot_be_written_is_refused_before_connecting(tmp_path):
    (tmp_path / "adir").mkdir()
    for log in (tmp_path / "adir", "/proc/rtc-no/metrics.jsonl"):
        result = run(SFT, tmp_path, "--data", DATA / "sft-chat.jsonl", "--log", log)
        assert_refused_before_training(result, tmp_path, f"error: --log {log}: cannot write there")
        assert "cannot reach Tinker" not in result.stderr  # refused before connecting


def test_rows_are_parsed_fully_with_file_and_line(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": "a", "completion": "b"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    result = run(SFT, tmp_path, "--data", deep, "--dry-run")
    assert_refused_before_training(result, tmp_path, f"{deep}:2: JSON nested too deeply to be a row")

    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "a", "completion": "b"}\n{"prompt": "caf\xe9", "completion": "b"}\n')
    result = run(SFT, tmp_path, "--data", latin, "--dry-run")
    assert_refused_before_training(result, tmp_path, f"{latin}:2: not UTF-8 text (column 16)")


@pytest.mark.parametrize(
    ("card", "metadata", "message"),
    [
        ("grpo-math-qwen3", {"answr": "4"}, 'metadata: needs "answer"'),
        ("grpo-match-deepseek", {"pattern": "(unclosed"}, '"pattern" is not a regular expression'),
        ("grpo-json-gpt-oss", {"schema": "object"}, '"schema" must be an object'),
        ("grpo-code-llama3", {"tests": "assert f(1) =="}, 'needs "tests"'),
    ],
)
def test_metadata_the_verifier_cannot_grade_fails_the_dry_run(tmp_path, card, metadata, message):
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [{"prompt": "q", "metadata": {"answer": "1", "tests": ["assert True"], "expected": {"a": 1}}}] * 2,
    )
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[1]["metadata"] = metadata
    write_jsonl(data, rows)
    result = run(GENERATED / f"{card}.py", tmp_path, "--data", data, "--dry-run")
    assert_refused_before_training(result, tmp_path, f"{data}:2: metadata: ")
    assert message in result.stderr


def test_a_row_longer_than_the_context_fails_the_dry_run(tmp_path):
    """The card's max_length is known offline (the Qwen3 family format renders without network)."""
    long = write_jsonl(tmp_path / "long.jsonl", [{"prompt": "word " * 300_000, "completion": "ok"}])
    result = run(SFT, tmp_path, "--data", long, "--dry-run")
    assert_refused_before_training(result, tmp_path, f"{long}:1: this row makes a sequence of")


def test_a_row_longer_than_the_served_context_stops_the_run_before_step_0(server, tmp_path):
    """The served model's context (rtc serve's tiny: 2048 tokens) is only known once connected."""
    rows = [{"prompt": "hello", "completion": "hi"}, {"prompt": "word " * 3000, "completion": "ok"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    result = run(SFT, tmp_path, "--data", data, "--steps", "2", url=server)
    assert_refused_before_training(result, tmp_path, f"{data}:2: this row makes a sequence of")
    assert "over the limit of 2048" in result.stderr and "overlong: cut" in result.stderr


def test_overlong_cut_trains_with_the_prompt_cut_and_counted(server, tmp_path):
    rows = [{"prompt": "hello", "completion": "hi"}, {"prompt": "word " * 3000, "completion": "ok"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    loop = tmp_path / "cut.py"
    loop.write_text(SFT.read_text().replace('OVERLONG = "refuse"', 'OVERLONG = "cut"'))
    result = run(
        loop,
        tmp_path,
        "--data",
        data,
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--eval-every",
        "0",
        "--max-tokens",
        "4",
        url=server,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert "1 longer than 2048 tokens" in result.stdout
    record = json.loads((tmp_path / "runs" / "cut" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["train/cut_to_length"] == 1


def test_a_corrupt_checkpoint_list_is_named_on_resume(tmp_path):
    run_dir = tmp_path / "runs" / "sft-chat-qwen3"
    run_dir.mkdir(parents=True)
    (run_dir / "checkpoints.jsonl").write_text(
        '{"step": 1, "path": "tinker://x/weights/y"}\n{"step": 2, "pa\n'
    )
    result = run(SFT, tmp_path, "--data", DATA / "sft-chat.jsonl", "--resume")  # before connecting
    assert_refused_before_training(
        result, tmp_path, "error: --resume: runs/sft-chat-qwen3/checkpoints.jsonl:2: not valid JSON", code=1
    )
