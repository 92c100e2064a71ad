"""The code verifier (templates/verifiers/code.py): sandboxed runs, partial credit, hostile completions.

Every hostile case asserts the score (0, or what the code honestly passed), that this process is still
here and that the run stayed within its wall-clock budget. The fork bomb is safe to run on a shared
machine: the sandbox caps the sandbox user at 16 processes, the run at 2 s, and kills the whole group.
"""

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

ADD_TESTS = {
    "tests": [
        "assert add(1, 2) == 3",
        "assert add(-1, 1) == 0",
        "assert add(2, 2) == 4",
        "assert add(0, 0) == 0",
    ],
    "entry_point": "add",
}
GOOD = "def add(a, b):\n    return a + b\n"
PARTIAL = "def add(a, b):\n    return a + b if a > 0 else 7\n"
HOSTILE_TIMEOUT_S = 2.0
# Interpreter start and teardown on a busy 2-core machine, on top of the run's own timeout.
SLACK_S = 3.0


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is my solution.\n\n```{tag}\n{code}```\n\nIt adds the numbers."


def run(code_verify, completion, metadata=None, timeout_s=HOSTILE_TIMEOUT_S):
    metadata = {**ADD_TESTS, "timeout_s": timeout_s} if metadata is None else metadata
    pid = os.getpid()
    start = time.monotonic()
    scores = code_verify(completion, metadata)
    elapsed = time.monotonic() - start
    assert os.getpid() == pid
    assert elapsed < metadata.get("timeout_s", 5.0) + SLACK_S, elapsed
    assert set(scores) == {
        "reward",
        "correct",
        "tests_passed",
        "tests_total",
        "timeout",
        "sandbox_error",
        "metadata_ok",
    }
    assert all(isinstance(value, float) for value in scores.values())
    assert scores["sandbox_error"] == 0.0 or scores["metadata_ok"] == 0.0
    return scores


# --- honest solutions --------------------------------------------------------------------------


def test_correct_solution_scores_one(code_verify):
    scores = run(code_verify, fenced(GOOD))
    assert scores["reward"] == 1.0
    assert scores["correct"] == 1.0
    assert (scores["tests_passed"], scores["tests_total"], scores["timeout"]) == (4.0, 4.0, 0.0)


def test_partially_correct_solution_scores_the_fraction(code_verify):
    scores = run(code_verify, fenced(PARTIAL))
    assert scores["tests_passed"] == 2.0  # add(1, 2) and add(2, 2) pass; the others return 7
    assert scores["reward"] == pytest.approx(0.5)
    assert scores["correct"] == 0.0


def test_wrong_solution_scores_zero(code_verify):
    scores = run(code_verify, fenced("def add(a, b):\n    return a - b - 1\n"))
    assert scores["reward"] == 0.0
    assert scores["tests_total"] == 4.0


def test_syntax_error_scores_zero(code_verify):
    assert run(code_verify, fenced("def add(a, b)\n    return a + b\n"))["reward"] == 0.0


def test_missing_entry_point_scores_zero(code_verify):
    assert run(code_verify, fenced("def plus(a, b):\n    return a + b\n"))["reward"] == 0.0


def test_no_fence_uses_the_whole_completion(code_verify):
    assert run(code_verify, GOOD)["reward"] == 1.0


def test_last_python_block_wins_over_plain_output_block(code_verify):
    completion = (
        "```python\ndef add(a, b):\n    return 0\n```\nBetter:\n```python\n" + GOOD + "```\n"
        "Output:\n```\n3\n```\n"
    )
    assert run(code_verify, completion)["reward"] == 1.0


def test_plain_fence_and_unclosed_fence(code_verify):
    assert run(code_verify, "```\n" + GOOD + "```")["reward"] == 1.0
    assert run(code_verify, "```python\n" + GOOD)["reward"] == 1.0  # cut off by max_tokens


def test_main_guard_does_not_run(code_verify):
    code = GOOD + "if __name__ == '__main__':\n    print(add(int(input()), 2))\n"
    assert run(code_verify, fenced(code))["reward"] == 1.0


def test_string_tests_split_into_asserts_with_setup(code_verify):
    metadata = {
        "tests": "import math\nassert add(1, 2) == 3\n"
        "assert add(math.floor(2.5), 1) == 3\nassert add(1, 1) == 3\n"
    }
    scores = run(code_verify, fenced(GOOD), metadata)
    assert (scores["tests_passed"], scores["tests_total"]) == (2.0, 3.0)


def test_humaneval_check_function_is_one_test(code_verify):
    metadata = {
        "tests": "def check(candidate):\n    assert candidate(1, 2) == 3\n"
        "    assert candidate(5, 5) == 10\n\ncheck(add)\n",
        "entry_point": "add",
    }
    assert run(code_verify, fenced(GOOD), metadata)["tests_total"] == 1.0
    metadata["tests"] = metadata["tests"].replace("check(add)", "check(candidate)")
    assert run(code_verify, fenced(GOOD), metadata)["reward"] == 1.0


def test_candidate_can_write_files_in_its_own_directory(code_verify):
    code = (
        GOOD
        + "with open('scratch.txt', 'w') as f:\n    f.write('ok')\n"
        + "assert open('scratch.txt').read() == 'ok'\n"
    )
    assert run(code_verify, fenced(code))["reward"] == 1.0


def test_standard_library_imports_work_in_the_sandbox(code_verify):
    code = "import collections, fractions, heapq, itertools, json, re, statistics\n" + GOOD
    assert run(code_verify, fenced(code))["reward"] == 1.0


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"tests": []},
        {"tests": ""},
        {"tests": [1, 2]},
        {"tests": "assert ("},
        {"tests": ["assert True"], "entry_point": 3},
    ],
)
def test_missing_or_malformed_tests_score_zero_without_running(code_verify, metadata):
    scores = code_verify(fenced(GOOD), metadata)
    assert scores["reward"] == 0.0
    assert scores["metadata_ok"] == 0.0
    assert scores["tests_total"] == 0.0


@pytest.mark.parametrize("metadata", [None, "tests", ["assert True"]])
def test_non_dict_metadata_scores_zero(code_verify, metadata):
    assert code_verify(fenced(GOOD), metadata)["metadata_ok"] == 0.0


@pytest.mark.parametrize("completion", [None, "", "\x00\x00", "\udcff", "```python\n```"])
def test_odd_completions_score_zero(code_verify, completion):
    assert run(code_verify, completion)["reward"] == 0.0


def test_temporary_directory_is_removed(code_verify, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = GOOD + "open('leftover.txt', 'w').write('x')\nimport os\nos.mkdir('sub')\nos.chmod('sub', 0)\n"
    assert run(code_verify, fenced(code))["reward"] == 1.0
    assert list(tmp_path.iterdir()) == []


# --- hostile completions -----------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_infinite_loop_times_out_with_zero(code_verify):
    scores = run(code_verify, fenced(GOOD + "while True:\n    pass\n"))
    assert scores["reward"] == 0.0
    assert scores["timeout"] == 1.0


@pytest.mark.timeout(30)
def test_hang_in_one_test_keeps_the_tests_passed_before_it(code_verify):
    code = "def add(a, b):\n    while a == -1:\n        pass\n    return a + b\n"
    scores = run(code_verify, fenced(code))
    assert (scores["tests_passed"], scores["timeout"]) == (
        1.0,
        1.0,
    )  # add(1, 2) passed before add(-1, 1) hung


@pytest.mark.timeout(30)
def test_bounded_fork_loop_is_capped(code_verify):
    # The check the fork bomb below relies on: at most a handful of processes ever start.
    code = (
        "import os, time\nforks = 0\nfor _ in range(50):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
        "    forks += 1\n" + GOOD + "def capped():\n    return forks < 20\n"
    )
    metadata = {"tests": ["assert capped()", "assert add(1, 2) == 3"], "timeout_s": HOSTILE_TIMEOUT_S}
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


@pytest.mark.timeout(30)
def test_fork_bomb_scores_zero_and_is_contained(code_verify):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n" + GOOD
    scores = run(code_verify, fenced(code))
    assert scores["reward"] == 0.0
    assert scores["timeout"] == 1.0


@pytest.mark.timeout(30)
def test_memory_hog_scores_zero(code_verify):
    code = "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))\n" + GOOD
    assert run(code_verify, fenced(code))["reward"] == 0.0


@pytest.mark.parametrize(
    "crash",
    [
        "import ctypes\nctypes.string_at(0)\n",
        "import os\nos.abort()\n",
        "import sys\nsys.setrecursionlimit(10**6)\ndef f():\n    f()\nf()\n",
    ],
    ids=["segfault", "abort", "stack-overflow"],
)
def test_crash_scores_zero(code_verify, crash):
    assert run(code_verify, fenced(crash + GOOD))["reward"] == 0.0


def test_crash_inside_a_test_keeps_the_tests_passed_before_it(code_verify):
    code = "import os\ndef add(a, b):\n    if a == 2:\n        os.abort()\n    return a + b\n"
    assert run(code_verify, fenced(code))["tests_passed"] == 2.0  # add(1, 2), add(-1, 1); add(2, 2) crashes


@pytest.mark.parametrize(
    "exit_call", ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n"]
)
def test_exit_before_tests_scores_zero(code_verify, exit_call):
    assert run(code_verify, fenced(GOOD + exit_call))["reward"] == 0.0


def test_exit_inside_a_test_counts_as_failure(code_verify):
    code = "import sys\ndef add(a, b):\n    if a == 0:\n        sys.exit(0)\n    return a + b\n"
    assert run(code_verify, fenced(code))["tests_passed"] == 3.0


@pytest.mark.timeout(30)
def test_output_flooding_is_harmless(code_verify):
    code = (
        GOOD
        + "import sys\nfor _ in range(100_000):\n    print('x' * 1000)\n    sys.stderr.write('y' * 1000)\n"
    )
    assert run(code_verify, fenced(code))["reward"] == 1.0  # it passes honestly; the flood went nowhere


@pytest.mark.timeout(30)
def test_flooding_every_descriptor_earns_nothing(code_verify):
    code = (
        "import os\nfor fd in range(3, 20):\n    try:\n"
        "        os.write(fd, b'0 1\\n1 1\\n2 1\\n3 1\\n' * 50_000)\n"
        "    except OSError:\n        pass\n"
    )
    assert run(code_verify, fenced(code))["reward"] == 0.0  # no add(): forged lines lack the nonce


def test_forged_result_lines_earn_nothing(code_verify):
    code = (
        "import json, os, sys\nfor i in range(4):\n    print(f'{i} 1')\n"
        "    print(json.dumps({'test': i, 'passed': True}))\n"
        "sys.stdout.flush()\nos._exit(0)\n"
    )
    assert run(code_verify, fenced(code))["reward"] == 0.0


def test_rebinding_reporting_functions_changes_nothing(code_verify):
    code = (
        "import builtins, json, os\njson.dumps = lambda *a, **k: '1'\nos.write = lambda *a: 0\n"
        "builtins.exec = lambda *a: None\nbuiltins.compile = lambda *a: None\n"
    )
    assert run(code_verify, fenced(code + "def add(a, b):\n    return 7\n"))["reward"] == 0.0


def test_tests_are_not_readable_by_the_candidate(code_verify):
    code = "import os\nSEEN = os.listdir('.')\n" + GOOD
    metadata = {**ADD_TESTS, "tests": ["assert SEEN == []", "assert add(1, 2) == 3"]}
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


def test_environment_secrets_are_not_inherited(code_verify, monkeypatch):
    monkeypatch.setenv("RTC_VERIFIER_SECRET", "tml-secret-key")
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")
    metadata = {
        "tests": [
            "import os\nassert 'RTC_VERIFIER_SECRET' not in os.environ",
            "import os\nassert 'tml-secret' not in repr(os.environ) and os.getenv('PYTHONPATH') is None",
            "import os\nassert sorted(os.environ) == ['LANG', 'PATH']",
        ]
    }
    assert run(code_verify, fenced(GOOD), metadata)["reward"] == 1.0


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges are dropped only when running as root")
def test_root_is_dropped_to_nobody(code_verify, monkeypatch):
    monkeypatch.setenv("RTC_VERIFIER_SECRET", "tml-secret-key")
    metadata = {
        "tests": [
            "import os\nassert os.getresuid() == (65534, 65534, 65534) and os.getgroups() == []",
            f"try:\n    leaked = 'tml-secret-key' in open('/proc/{os.getpid()}/environ').read()\n"
            "except OSError:\n    leaked = False\nassert not leaked",
            "import os\ntry:\n    os.kill(1, 0)\n    allowed = True\n"
            "except PermissionError:\n    allowed = False\nassert not allowed",
        ]
    }
    assert run(code_verify, fenced(GOOD), metadata)["reward"] == 1.0


# --- concurrency -------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_parallel_verification_matches_serial(code_verify):
    cases = [
        (fenced(GOOD), ADD_TESTS),
        (fenced(PARTIAL), ADD_TESTS),
        (fenced("def add(a, b):\n    return a - b - 1\n"), ADD_TESTS),
        (fenced("def add(a, b)\n    return 1\n"), ADD_TESTS),
        (fenced(GOOD + "while True:\n    pass\n"), {**ADD_TESTS, "timeout_s": 1.0}),
        (fenced("import os\nos.abort()\n"), ADD_TESTS),
        (fenced(GOOD + "for _ in range(20000):\n    print('x' * 100)\n"), ADD_TESTS),
        ("no code at all", ADD_TESTS),
    ] * 2
    serial = [code_verify(completion, metadata) for completion, metadata in cases]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(lambda case: code_verify(*case), cases))
    assert parallel == serial
    assert [scores["reward"] for scores in serial[:8]] == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]


def test_sandbox_that_cannot_start_is_reported(code_verify, monkeypatch):
    monkeypatch.setattr("sys.executable", "/nonexistent/python3")
    scores = code_verify(fenced(GOOD), ADD_TESTS)
    assert (scores["reward"], scores["sandbox_error"], scores["metadata_ok"]) == (0.0, 1.0, 1.0)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="without the drop to nobody the candidate could signal this process"
)
def test_candidate_cannot_kill_the_verifying_process(code_verify):
    code = (
        "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n    pass\n"
        + GOOD
    )
    assert run(code_verify, fenced(code))["reward"] == 1.0
