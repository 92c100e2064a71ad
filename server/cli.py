"""``rtc serve``: start the local Tinker-compatible server.

The banner printed once the socket listens is part of the interface: other tools start the
server as a subprocess and read ``TINKER_BASE_URL=...`` and ``TINKER_API_KEY=...`` from its
stdout.

The server always has a key. Without ``--api-key`` (or ``$RTC_SERVE_API_KEY``, which keeps it out
of the process list that every user can read) it makes a random one and prints it, the way
notebook servers print a token. Listening anywhere but loopback needs a key given on purpose.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
from pathlib import Path

from .limits import MIB, Limits

KEY_ENV = "RTC_SERVE_API_KEY"
KEY_PREFIX = "tml-"  # the SDK refuses keys without it
MIN_PUBLIC_KEY_CHARS = 16  # after the prefix, for a server others can reach

EXAMPLE = """\
models:
  smollm2         SmolLM2-135M-Instruct (default); serves any base_model name
  tiny            a tiny random model with its own small tokenizer; serves any name
  tiny-qwen3      Qwen3 models (Qwen/Qwen3-8B, ...)
  tiny-qwen35     Qwen3.5, 3.6 and 3.8 models (Qwen/Qwen3.5-4B, ...)
  tiny-nemotron3  Nemotron 3 models (nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, ...)
  tiny-gpt-oss    gpt-oss models, harmony format (openai/gpt-oss-20b, openai/gpt-oss-120b)
  tiny-deepseek   DeepSeek-V3.1 and DeepSeek-V3.1-Base
  tiny-llama3     Llama 3 models, Llama 3.1 chat template (meta-llama/Llama-3.1-8B-Instruct, ...)
  DIR             a local Hugging Face model directory; serves any name
A tiny-<family> model has random weights (64 wide, 2 layers) and the family's real vocabulary,
special tokens and stop tokens; it serves only the names of its family in `rtc list models` and
refuses others. Each is built once (seconds) and cached under ~/.cache/rtc/models.

example:
  rtc serve --model tiny-qwen3
  # then, in another terminal, with the two lines it prints:
  export TINKER_BASE_URL=http://127.0.0.1:8000
  export TINKER_API_KEY=tml-...
  python loop.py --data d.jsonl
"""


def default_state_dir() -> Path:
    from .models import cache_dir

    return cache_dir() / "serve-state"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rtc serve",
        description="Run a local Tinker-compatible training server on the CPU (LoRA on a small model).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s); any other than loopback needs --api-key",
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="port; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--model",
        default="smollm2",
        help="smollm2 (default), tiny, tiny-<family> (a test model in a family's real format; "
        "see models below) or a local Hugging Face model directory",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where tinker:// checkpoints are stored (default: ~/.cache/rtc/serve-state)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"refuse requests whose X-API-Key differs (401); default: ${KEY_ENV}, else a new random key",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="add this delay to every request, to mimic a remote service",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: half the cores)"
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="compute dtype of the base weights; LoRA, optimizer state and logits stay float32 "
        "(default: %(default)s; bfloat16 halves memory, and is faster only on CPUs with bf16 matmuls)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="server log level"
    )
    parser.add_argument("--quiet", action="store_true", help="same as --log-level warning")
    defaults = Limits()
    limits = parser.add_argument_group("limits (a request over one gets a 4xx naming the flag)")
    limits.add_argument(
        "--max-body-mb",
        type=int,
        default=defaults.max_body_bytes // MIB,
        help="largest request body (default: %(default)s)",
    )
    limits.add_argument(
        "--max-inflated-mb",
        type=int,
        default=defaults.max_inflated_bytes // MIB,
        help="largest size a compressed body may inflate to (default: %(default)s)",
    )
    limits.add_argument(
        "--max-request-tokens",
        type=int,
        default=defaults.max_request_tokens,
        help="most tokens in one forward_backward or sampling prompt (default: %(default)s)",
    )
    limits.add_argument(
        "--max-sample-tokens",
        type=int,
        default=defaults.max_sample_tokens,
        help="most num_samples x max_tokens in one sample request (default: %(default)s)",
    )
    limits.add_argument(
        "--max-adapters-per-session",
        type=int,
        default=defaults.max_adapters_per_session,
        help="training clients + sampler weights one session may hold (default: %(default)s)",
    )
    limits.add_argument(
        "--max-adapters",
        type=int,
        default=defaults.max_adapters,
        help="training clients + sampler weights all sessions may hold (default: %(default)s)",
    )
    return parser


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``; the empty host means every interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_key(key: str | None, host: str) -> str | None:
    """The reason ``key`` cannot serve ``host``, or ``None``."""
    if key is None:
        if is_loopback(host):
            return None
        shown = repr(host) if host else "'' (every interface)"
        return (
            f"--host {shown} is reachable from other machines; give a key with --api-key or "
            f"${KEY_ENV} (a random one is only made for loopback hosts)"
        )
    if not key.startswith(KEY_PREFIX):
        return f"the API key must start with {KEY_PREFIX!r}: the Tinker SDK sends no other"
    if not key.isascii() or not key.isprintable() or " " in key:
        return "the API key must be printable ASCII without spaces"
    if not is_loopback(host) and len(key) - len(KEY_PREFIX) < MIN_PUBLIC_KEY_CHARS:
        return (
            f"a key for a host other machines can reach needs at least {MIN_PUBLIC_KEY_CHARS} "
            f"characters after {KEY_PREFIX!r}"
        )
    return None


def shown_url(host: str, port: int) -> str:
    """The URL a client on this machine uses: loopback for a host that means every interface."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def limits_from(args: argparse.Namespace) -> Limits:
    return Limits(
        max_body_bytes=args.max_body_mb * MIB,
        max_inflated_bytes=args.max_inflated_mb * MIB,
        max_request_tokens=args.max_request_tokens,
        max_sample_tokens=args.max_sample_tokens,
        max_adapters_per_session=args.max_adapters_per_session,
        max_adapters=args.max_adapters,
    )


def _quiet_exit_server():
    import uvicorn

    class QuietExitServer(uvicorn.Server):
        """Stops on Ctrl-C or SIGTERM and lets ``main`` return 0.

        uvicorn re-raises the captured signal after a graceful shutdown, which would turn
        SIGTERM into a non-zero exit status; a second Ctrl-C still forces the exit.
        """

        def handle_exit(self, sig: int, frame) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True

    return QuietExitServer


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Naming IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and without it every response waits ~40 ms for a delayed ACK (Nagle's algorithm).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = "warning" if args.quiet else args.log_level
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.port < 0 or args.port > 65535:
        print(f"Error: port {args.port} is out of range", file=sys.stderr)
        return 2
    if args.latency_ms < 0:
        print("Error: --latency-ms must be >= 0", file=sys.stderr)
        return 2
    if args.threads is not None and args.threads < 1:
        print("Error: --threads must be >= 1", file=sys.stderr)
        return 2
    api_key = args.api_key if args.api_key is not None else os.environ.get(KEY_ENV) or None
    problem = check_key(api_key, args.host)
    if problem is None:
        try:
            limits = limits_from(args)
            limits.check()
        except ValueError as error:
            problem = str(error)
    if problem is not None:
        print(f"Error: {problem}", file=sys.stderr)
        return 2
    generated = api_key is None
    if generated:
        api_key = KEY_PREFIX + secrets.token_urlsafe(32)

    try:
        sock = _bind(args.host, args.port)
    except OSError as error:
        reason = "address already in use" if error.errno == errno.EADDRINUSE else error.strerror
        print(f"Error: cannot listen on {args.host}:{args.port}: {reason}", file=sys.stderr)
        return 2

    from .models import ModelPreparationError, prepare

    try:
        prepared = prepare(args.model)
        state_dir = (args.state_dir or default_state_dir()).expanduser()
        state_dir.mkdir(parents=True, exist_ok=True)
    except (ModelPreparationError, OSError) as error:
        sock.close()
        print(f"Error: {error}", file=sys.stderr)
        return 2

    import uvicorn

    from .app import create_app
    from .engine import Engine
    from .service import ServerOptions, TinkerService

    try:
        engine = Engine(prepared.path, threads=args.threads, dtype=args.dtype)
    except (OSError, ValueError) as error:
        sock.close()
        print(f"Error: cannot load the model from {prepared.path}: {error}", file=sys.stderr)
        return 2
    options = ServerOptions(
        model_dir=prepared.path,
        model_description=prepared.description,
        model=prepared,
        state_dir=state_dir,
        api_key=api_key,
        latency_ms=args.latency_ms,
        limits=limits,
    )
    service = TinkerService(engine, options)
    app = create_app(service)
    port = sock.getsockname()[1]
    url = shown_url(args.host, port)

    config = uvicorn.Config(
        app, log_level="warning" if level == "info" else level, timeout_graceful_shutdown=3, access_log=False
    )
    server = _quiet_exit_server()(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            print(f"rtc serve: {prepared.description} ready on {url}")
            if not is_loopback(args.host):
                where = args.host or "every interface"
                print(f"  listening on {where}, port {port}: reachable from other machines")
            if generated:
                print("  a random API key was made for this run (give one with --api-key to keep it)")
            print(f"  export TINKER_BASE_URL={url}")
            print(f"  export TINKER_API_KEY={api_key}")
            sys.stdout.flush()
        await task

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
        sock.close()
    logging.getLogger("rtc.serve").info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
