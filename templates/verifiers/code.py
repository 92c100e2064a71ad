"""Code task verifier: run the completion's Python against metadata.tests in a sandboxed subprocess.

The code is the last ```python block of the completion (else the last plain ``` block, else the whole
text). A small harness runs it in a fresh interpreter (``python -I``) in a temporary directory, with a
minimal environment (PATH and LANG only), limits on CPU time, address space, file size, open files and
processes, in its own session; the whole process group is killed at the wall-clock deadline.

RLIMIT_NPROC does not apply to root, so when the loop runs as root the harness drops to nobody
(uid/gid 65534) before any candidate code runs. The drop happens inside the harness, after the
interpreter has started, not in the parent before exec: the interpreter may live where nobody cannot
even open it (pyenv under /root, mode 700), and the harness keeps the standard library importable
through directory descriptors opened while still root. Without root the process limit counts every
process and thread of the user, so candidate code usually cannot start processes at all.

Each test is reported on a private descriptor as a line tagged with a random nonce; the candidate's own
stdout and stderr go to /dev/null, so printing fake result lines or flooding output earns nothing.
Standard library only: this file is inlined into the generated training loop.

Limits of the sandbox (it is not a container): candidate code can read world-readable files and use
the network; memory is capped per process, not per process tree; a process that calls setsid() escapes
the group kill (CPU-time limits still end busy ones). Code that inspects the harness's own frames from
inside the same interpreter could forge results; reward hacking of that kind needs a container.
"""

import ast
import json
import math
import os
import re
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

_CODE_DEFAULT_TIMEOUT_S = 5.0  # wall clock for the whole run: interpreter start, solution and all tests
_CODE_MAX_TIMEOUT_S = 60.0  # metadata.timeout_s is clamped to (0, 60]
_CODE_MEMORY_BYTES = 512 * 1024 * 1024  # RLIMIT_AS per process
_CODE_FILE_BYTES = 8 * 1024 * 1024  # RLIMIT_FSIZE: largest file the code may write
_CODE_MAX_PROCESSES = 16  # RLIMIT_NPROC for the sandbox user: a fork bomb stops here
_CODE_MAX_OPEN_FILES = 64  # RLIMIT_NOFILE
_CODE_MAX_REPORT_BYTES = 1024 * 1024  # more on the report channel than this is flooding: stop reading
_CODE_SANDBOX_ID = 65534  # nobody / nogroup
_CODE_CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}  # nothing inherited
_CODE_PYTHON_TAGS = frozenset({"python", "python3", "py", "py3"})
_CODE_FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)")

# The harness runs in the child interpreter. It reads the job, sets the limits, drops root, then runs
# the solution and each test in one namespace and writes "<nonce> <test index> <0|1>" per test to a
# duplicate of its original stdout; the candidate's own stdout and stderr go to /dev/null, so flooding
# them costs nothing. Every function it calls after the candidate code starts is bound to a local
# first, so rebinding json.dumps, os.write or builtins cannot change what it reports.
_CODE_HARNESS = r"""
import json, os, resource, sys


def sandbox(cpu_s, memory, file_bytes, processes, open_files, sandbox_id):
    for kind, soft, hard in (
        (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_FSIZE, file_bytes, file_bytes),
        (resource.RLIMIT_NPROC, processes, processes),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        current_hard = resource.getrlimit(kind)[1]
        if current_hard != resource.RLIM_INFINITY:  # a stricter limit set by the caller stays
            hard = min(hard, current_hard)
        resource.setrlimit(kind, (min(soft, hard), hard))
    if os.geteuid() == 0:
        # The interpreter may live where nobody cannot traverse (pyenv under /root): keep the import
        # path reachable through directory descriptors opened while still root.
        moved = {}
        if os.path.isdir("/proc/self/fd"):
            for entry in sys.path:
                if entry and entry not in moved and os.path.isdir(entry):
                    moved[entry] = "/proc/self/fd/%d" % os.open(entry, os.O_RDONLY | os.O_DIRECTORY)

        def relocate(path):
            for old, new in moved.items():
                if path == old or path.startswith(old + os.sep):
                    return new + path[len(old):]
            return path

        sys.path[:] = [relocate(entry) for entry in sys.path]
        for module in list(sys.modules.values()):
            package_path = getattr(module, "__path__", None)
            if type(package_path) is list:
                package_path[:] = [relocate(entry) for entry in package_path]
        sys.path_importer_cache.clear()
        os.chown(".", sandbox_id, sandbox_id)  # the candidate's writable cwd, root-only until now
        os.setgroups([])
        os.setresgid(sandbox_id, sandbox_id, sandbox_id)
        os.setresuid(sandbox_id, sandbox_id, sandbox_id)
        if 0 in os.getresuid() or 0 in os.getresgid():
            raise PermissionError("still root")
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))


def run():
    nonce = sys.stdin.readline().strip()
    cpu_s, memory, file_bytes, processes, open_files, sandbox_id = map(int, sys.argv[1:7])
    with open("job.json", encoding="utf-8") as handle:
        job = json.load(handle)
    os.unlink("job.json")  # the tests are not for the candidate to read
    report_fd = os.dup(1)
    write, encode, exec_, compile_, base_exception = os.write, str.encode, exec, compile, BaseException

    def emit(text):
        write(report_fd, encode("%s %s\n" % (nonce, text)))

    try:
        sandbox(cpu_s, memory, file_bytes, processes, open_files, sandbox_id)
    except Exception:
        emit("sandbox-error")  # never run candidate code outside the sandbox
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    namespace = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec_(compile_(job["code"], "solution.py", "exec"), namespace)
        entry_point = job["entry_point"]
        if entry_point:
            namespace.setdefault("candidate", namespace[entry_point])  # HumanEval-style check(candidate)
    except base_exception:
        emit("solution-failed")
        return
    index = 0
    for source, is_test in job["steps"]:
        try:
            exec_(compile_(source, "<test %d>" % index, "exec"), namespace)
            passed = True
        except base_exception:
            passed = False
        if is_test:
            emit("%d %d" % (index, passed))
            index += 1
        elif not passed:
            break  # a failed setup statement fails every test after it


run()
"""


def _code_extract_program(completion: str) -> str:
    """The last ```python block, else the last plain ``` block, else the whole completion.

    An unclosed final fence (the sample hit max_tokens) still counts as a block.
    """
    blocks: list[tuple[str, list[str]]] = []
    fence = ""
    for line in completion.splitlines():
        if fence:
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = ""
            else:
                blocks[-1][1].append(line)
            continue
        opening = _CODE_FENCE_RE.match(line)
        if opening:
            fence = opening.group(1)
            blocks.append((opening.group(2).lower(), []))
    for wanted in (_CODE_PYTHON_TAGS, frozenset({""})):
        for tag, lines in reversed(blocks):
            if tag in wanted:
                return textwrap.dedent("\n".join(lines))
    return completion


def _code_test_steps(tests: object) -> list[tuple[str, bool]] | None:
    """metadata["tests"] as (source, is_test) steps; None when malformed.

    A list: each string is one test. A string: each top-level assert is one test and other statements
    (imports, helpers) run in order as setup; a string without a top-level assert (HumanEval's
    "def check(candidate): ..." plus a call) is a single test.
    """
    if isinstance(tests, list | tuple):
        if tests and all(isinstance(test, str) and test.strip() for test in tests):
            return [(test, True) for test in tests]
        return None
    if not isinstance(tests, str) or not tests.strip():
        return None
    try:
        body = ast.parse(tests).body
        steps = [(ast.unparse(node), isinstance(node, ast.Assert)) for node in body]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not any(is_test for _, is_test in steps):
        return [(tests, True)]
    return steps


def _code_timeout(metadata: dict) -> float:
    value = metadata.get("timeout_s")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return min(float(value), _CODE_MAX_TIMEOUT_S)
    return _CODE_DEFAULT_TIMEOUT_S


def _code_exited(process: subprocess.Popen) -> bool:
    """Whether the harness has exited, without reaping it: while it is a zombie its pid (the process
    group id) cannot be reused, so the group kill afterwards cannot hit an unrelated process."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _code_read_report(process: subprocess.Popen, deadline: float) -> tuple[bytes, bool]:
    """Read the report channel until EOF, harness exit or the deadline; returns (data, timed_out)."""
    chunks: list[bytes] = []
    size = 0
    fd = process.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b"".join(chunks), True
            # Short waits: a grandchild holding the pipe open must not keep us here once the harness is done.
            if selector.select(min(remaining, 0.05)):
                data = os.read(fd, 65536)
                if not data:
                    break
                size += len(data)
                if size > _CODE_MAX_REPORT_BYTES:
                    break
                chunks.append(data)
            elif _code_exited(process):
                while selector.select(0) and size <= _CODE_MAX_REPORT_BYTES:  # what it wrote before exiting
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    size += len(data)
                    chunks.append(data)
                break
    return b"".join(chunks), False


def _code_run_sandboxed(
    program: str, steps: list[tuple[str, bool]], entry_point: str, timeout_s: float
) -> tuple[dict[int, bool], bool, bool]:
    """Run the harness; returns ({test index: passed}, timed_out, sandbox_error)."""
    nonce = secrets.token_hex(16)
    limits = [
        math.ceil(timeout_s) + 1,
        _CODE_MEMORY_BYTES,
        _CODE_FILE_BYTES,
        _CODE_MAX_PROCESSES,
        _CODE_MAX_OPEN_FILES,
        _CODE_SANDBOX_ID,
    ]
    with tempfile.TemporaryDirectory(prefix="rtc-verify-code-", ignore_cleanup_errors=True) as workdir:
        with open(os.path.join(workdir, "job.json"), "w", encoding="utf-8") as handle:
            json.dump({"code": program, "steps": steps, "entry_point": entry_point}, handle)
        deadline = time.monotonic() + timeout_s
        process = subprocess.Popen(
            [sys.executable, "-I", "-c", _CODE_HARNESS, *map(str, limits)],
            cwd=workdir,
            env=dict(_CODE_CHILD_ENV),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, killed as a whole below
        )
        try:
            try:
                process.stdin.write(f"{nonce}\n".encode())
                process.stdin.close()
            except OSError:  # the harness died before reading: nothing passes
                pass
            report, timed_out = _code_read_report(process, deadline)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # forks and grandchildren included
            except OSError:
                pass
            process.wait()
            process.stdout.close()
    results: dict[int, bool] = {}
    sandbox_error = False
    prefix = f"{nonce} ".encode()
    for line in report.splitlines():
        if not line.startswith(prefix):
            continue
        fields = line[len(prefix) :].split()
        if fields == [b"sandbox-error"]:
            sandbox_error = True
        elif len(fields) == 2 and fields[0].isdigit() and fields[1] in (b"0", b"1"):
            results[int(fields[0])] = fields[1] == b"1"
    return results, timed_out, sandbox_error


def verify(completion: str, metadata: dict) -> dict[str, float]:
    """Run the completion's code against metadata["tests"] and score the fraction of tests passed.

    metadata: "tests" (a list of assert statements, or a string of test code), optional "entry_point"
    (the function the tests call; also bound as `candidate`) and "timeout_s" (default 5, at most 60).
    Returns reward (tests_passed / tests_total), correct (1.0 when all pass), tests_passed, tests_total,
    timeout (1.0 when the run hit the wall-clock limit), sandbox_error (1.0 when the sandbox could not
    run, e.g. no permission to change user) and metadata_ok (0.0 when the tests are missing or
    malformed, which scores 0). Never raises; safe to call from several threads at once.
    """
    scores = {
        "reward": 0.0,
        "correct": 0.0,
        "tests_passed": 0.0,
        "tests_total": 0.0,
        "timeout": 0.0,
        "sandbox_error": 0.0,
        "metadata_ok": 0.0,
    }
    if not isinstance(metadata, dict):
        return scores
    steps = _code_test_steps(metadata.get("tests"))
    entry_point = metadata.get("entry_point") or ""
    if steps is None or not isinstance(entry_point, str):
        return scores
    total = sum(1 for _, is_test in steps if is_test)
    scores["metadata_ok"] = 1.0
    scores["tests_total"] = float(total)
    program = _code_extract_program(completion if isinstance(completion, str) else "")
    try:
        results, timed_out, sandbox_error = _code_run_sandboxed(
            program, steps, entry_point, _code_timeout(metadata)
        )
    except (OSError, subprocess.SubprocessError, ValueError):  # cannot start Python, no temp dir, ...
        scores["sandbox_error"] = 1.0
        return scores
    passed = sum(1 for index, ok in results.items() if ok and index < total)
    scores["tests_passed"] = float(passed)
    scores["reward"] = passed / total
    scores["correct"] = 1.0 if passed == total else 0.0
    scores["timeout"] = 1.0 if timed_out else 0.0
    scores["sandbox_error"] = 1.0 if sandbox_error else 0.0
    return scores
