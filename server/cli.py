"""``rtc serve``: start the local Tinker-compatible server.

The banner printed once the socket listens is part of the interface: other tools start the
server as a subprocess and read ``TINKER_BASE_URL=...`` from its stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import socket
import sys
from pathlib import Path

EXAMPLE = """\
example:
  rtc serve --model tiny
  # then, in another terminal, with the two lines it prints:
  export TINKER_BASE_URL=http://127.0.0.1:8000
  export TINKER_API_KEY=tml-local
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
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--port", type=int, default=8000, help="port; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--model",
        default="smollm2",
        help="'smollm2' (SmolLM2-135M-Instruct, default), 'tiny' (a test model) or a local HF model dir",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where tinker:// checkpoints are stored (default: ~/.cache/rtc/serve-state)",
    )
    parser.add_argument("--api-key", default=None, help="refuse requests whose X-API-Key differs (401)")
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
    return parser


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
        state_dir=state_dir,
        api_key=args.api_key,
        latency_ms=args.latency_ms,
    )
    service = TinkerService(engine, options)
    app = create_app(service)
    port = sock.getsockname()[1]
    shown_host = f"[{args.host}]" if ":" in args.host else args.host

    config = uvicorn.Config(
        app, log_level="warning" if level == "info" else level, timeout_graceful_shutdown=3, access_log=False
    )
    server = _quiet_exit_server()(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            print(f"rtc serve: {prepared.description} ready on http://{shown_host}:{port}")
            print(f"  export TINKER_BASE_URL=http://{shown_host}:{port}")
            print("  export TINKER_API_KEY=" + (args.api_key or "tml-local"))
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
