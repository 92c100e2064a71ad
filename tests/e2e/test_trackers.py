"""--trackio and --wandb: a tracker receives every metrics.jsonl record (its namespaced keys, at its
step) and the run's settings as its config; metrics.jsonl stays the record. trackio runs locally
(TRACKIO_DIR); W&B runs in its offline mode (WANDB_MODE=offline), read back from its run file."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from e2e_kit import DATA, GENERATED, loop_env, read_jsonl

TRACKIO_LOGS = """
import json, sys
from trackio.sqlite_storage import SQLiteStorage
project, run = sys.argv[1:]
print(json.dumps({"runs": SQLiteStorage.get_runs(project), "logs": SQLiteStorage.get_logs(project, run),
                  "config": SQLiteStorage.get_run_config(project, run)}))
"""


def tracker_env(url: str, tmp_path: Path) -> dict:
    env = loop_env(url)
    env.update(TRACKIO_DIR=str(tmp_path / "trackio"), WANDB_MODE="offline", WANDB_DIR=str(tmp_path))
    env.update(WANDB_SILENT="true", WANDB_DISABLE_CODE="true")
    return env


def wandb_records(run_file: Path) -> list:
    """The protobuf records of a W&B run file: a 7-byte header, then 32 KiB blocks of chunks, each
    with a 7-byte header (checksum, length, type: 1 full, 2 first, 3 middle, 4 last) as in LevelDB's log."""
    from wandb.proto import wandb_internal_pb2

    raw = run_file.read_bytes()
    assert raw[:4] == b":W&B"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(raw):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        if kind == 0:  # zero padding to the end of the block
            pos += left
            continue
        pending += raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def sent_records(metrics: list[dict]) -> list[tuple[int, dict]]:
    """What a tracker must have received: each record's namespaced keys, at its step."""
    return [(r["step"], {k: v for k, v in r.items() if k not in ("step", "split")}) for r in metrics]


def test_trackio_and_wandb_receive_every_metrics_record(server, tmp_path):
    command = [
        sys.executable,
        str(GENERATED / "sft-chat-qwen3.py"),
        "--data",
        DATA / "sft-chat.jsonl",
        "--eval-data",
        DATA / "sft-chat.eval.jsonl",
        "--steps",
        "3",
        "--eval-every",
        "2",
        "--save-every",
        "0",
        "--max-tokens",
        "4",
        "--out",
        "tracked",
        "--trackio",
        "rtc-test",
        "--wandb",
        "rtc-test",
    ]
    env = tracker_env(server, tmp_path)
    result = subprocess.run(
        list(map(str, command)), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = read_jsonl(tmp_path / "runs" / "tracked" / "metrics.jsonl")
    # Evals at steps 0 and 2 and after the last step; three train steps.
    assert [(r["step"], r["split"]) for r in metrics] == [
        (0, "eval"),
        (0, "train"),
        (1, "train"),
        (2, "eval"),
        (2, "train"),
        (3, "eval"),
    ]
    expected = sent_records(metrics)

    # trackio: one run named after --out, a row per record, in order, with every value as written.
    probe = subprocess.run(
        [sys.executable, "-c", TRACKIO_LOGS, "rtc-test", "tracked"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    stored = json.loads(probe.stdout.splitlines()[-1])
    assert stored["runs"] == ["tracked"]
    logs = stored["logs"]
    assert [
        (log["step"], {k: v for k, v in log.items() if k not in ("step", "timestamp")}) for log in logs
    ] == expected
    config = stored["config"]
    assert (config["steps"], config["model"], config["batch_size"]) == (3, "Qwen/Qwen3-4B-Instruct-2507", 8)
    assert config["data"] == str(DATA / "sft-chat.jsonl")

    # W&B (offline): the history merges the records of a step into one row; every key is there.
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    history: dict[int, dict] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
            history.setdefault(row["_step"], {}).update(row)
    assert sorted(history) == [0, 1, 2, 3]
    for step, sent in expected:
        assert {key: history[step][key] for key in sent} == sent
    [run] = [record.run for record in records if record.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name) == ("rtc-test", "tracked")
    wandb_config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert (wandb_config["steps"], wandb_config["lr"]) == (3, config["lr"])


def test_a_missing_tracker_package_is_named_before_connecting(tmp_path):
    # A trackio that cannot be imported, first on the path: the loop must stop with the install line.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "trackio.py").write_text("raise ImportError('No module named trackio')\n")
    env = loop_env("http://127.0.0.1:9")  # nothing listens: the loop must stop before connecting
    env["PYTHONPATH"] = str(shadow)
    command = [sys.executable, str(GENERATED / "sft-chat-qwen3.py"), "--data", str(DATA / "sft-chat.jsonl")]
    result = subprocess.run(
        [*command, "--trackio", "p"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "error: --trackio needs the trackio package: pip install trackio" in result.stderr
    assert "cannot reach" not in result.stderr
