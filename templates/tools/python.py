"""The `python` tool: model-written code runs in the code task's sandbox; the model reads what it printed.

The sandbox is the code verifier's (inlined above this with its threat model): the code runs as the
verifier's candidate process, under bubblewrap, with the same namespaces, rlimits and deadline, and no
view of the loop. Its output is captured inside the sandbox (stdout and stderr, and the traceback of an
exception) and handed back over the candidate's socket as one plain string, which the loop reads with
a size limit and a deadline: nothing the code does reaches the loop but that text. Where no sandbox
can start, the tool answers with an error (unless RTC_UNSAFE_CODE_NO_SANDBOX=1, as for the code task).
Standard library only: this file is inlined into the generated training loop, after the code
verifier's sandbox functions (_code_isolation, _code_spawn, _code_kill), which it uses.
"""

import json
import selectors
import socket
import subprocess
import time

_PYTHON_OUTPUT_CHARS = 2000  # characters of output the model reads (the end is kept)
_PYTHON_REPLY_BYTES = 64 * 1024  # the largest frame the loop accepts from the sandbox
# Runs in the sandbox as the candidate's program: the model's code (a string literal in it), its
# output captured, the end of it left in __output__ for the loop to ask for.
_PYTHON_PROGRAM = """\
import io, sys, traceback
_buffer = io.StringIO()
sys.stdout = sys.stderr = _buffer
try:
    exec(compile({code!r}, "<python>", "exec"), {{"__name__": "__main__"}})
except BaseException:
    traceback.print_exc()
__output__ = _buffer.getvalue()[-{chars}:]
"""


def _python_receive(channel: socket.socket, deadline: float) -> object:
    """One length-prefixed JSON frame from the sandbox, within the deadline and the size limit."""
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(channel, selectors.EVENT_READ)
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            if len(data) >= 4 and int.from_bytes(data[:4], "big") > _PYTHON_REPLY_BYTES:
                raise ValueError("the sandbox sent more than the output limit")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if selector.select(min(remaining, 0.05)):
                chunk = channel.recv(65536)
                if not chunk:
                    raise EOFError("the sandbox closed its socket")
                data += chunk
    size = int.from_bytes(data[:4], "big")
    return json.loads(data[4 : 4 + size])


def run_python(code: str, timeout_s: float) -> str:
    """Run `code` in the sandbox; what it printed (the end of it), or "error: ..." saying why not."""
    isolation = _code_isolation()
    if isolation[0] == "refuse":
        return "error: python is unavailable: no sandbox can start on this machine"
    deadline = time.monotonic() + timeout_s
    program = _PYTHON_PROGRAM.format(code=code, chars=_PYTHON_OUTPUT_CHARS)
    ours, theirs = socket.socketpair()
    started = None
    try:
        with theirs:
            job = json.dumps({"code": program}).encode()
            quiet = subprocess.DEVNULL
            started = _code_spawn(isolation, "candidate", job, (theirs.fileno(),), deadline, quiet, quiet)
        hello, ready = _python_receive(ours, deadline), _python_receive(ours, deadline)
        if hello != {"hello": True} or ready != {"ready": True}:
            return "error: the sandbox did not run the code"
        ours.sendall(len(b'["globals",["__output__"]]').to_bytes(4, "big") + b'["globals",["__output__"]]')
        reply = _python_receive(ours, deadline)
    except TimeoutError:
        return f"error: the code ran longer than {timeout_s:g} s"
    except (OSError, EOFError, ValueError, subprocess.SubprocessError):
        return "error: the sandbox stopped before the code finished"
    finally:
        ours.close()
        if started is not None:
            _code_kill(*started)
    try:
        ((name, output),) = reply["ok"]["d"]
    except (KeyError, TypeError, ValueError):
        return "error: the code's output could not be read"
    if name != "__output__" or not isinstance(output, str):
        return "error: the code's output could not be read"
    output = output[-_PYTHON_OUTPUT_CHARS:]
    return output if output.strip() else "(the code printed nothing)"
