"""What every request passes before a route sees it: the API key, then the body's size.

A plain ASGI middleware rather than FastAPI dependencies, so that nothing (not even reading
the body) happens for a request without the key, and no route can forget a check:

1. ``X-API-Key`` is compared with the server's key in constant time (:func:`hmac.compare_digest`),
   so response timing does not reveal how much of a guess was right.
2. The body is read up to ``--max-body-mb`` and refused with 413 beyond it (at once when
   ``Content-Length`` already says so), so a 60 MB body cannot stall the event loop.
3. A ``Content-Encoding: zstd`` body (what the SDK sends when told to compress) is inflated
   here, up to ``--max-inflated-mb``: a small body that inflates to gigabytes is a 413, not a
   doubling of the server's memory. Other encodings are a 415.
4. ``--latency-ms`` is added, to mimic a remote service.

Routes then read the already-checked body as usual.
"""

from __future__ import annotations

import asyncio
import hmac
import io
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import BadRequest, PayloadTooLarge, ServiceError, Unauthorized, UnsupportedMediaType
from .limits import MIB, Limits

INFLATE_CHUNK = 1 * MIB


def key_matches(given: bytes | None, key: bytes) -> bool:
    """Constant-time comparison (for equal lengths; a length mismatch says only that)."""
    return given is not None and hmac.compare_digest(given, key)


def inflate_zstd(body: bytes, limit: int) -> bytes:
    """Decompress ``body``, refusing output beyond ``limit`` bytes without producing it."""
    import zstandard

    out = io.BytesIO()
    try:
        with zstandard.ZstdDecompressor().stream_reader(body, read_across_frames=True) as reader:
            while chunk := reader.read(INFLATE_CHUNK):
                if out.tell() + len(chunk) > limit:
                    raise PayloadTooLarge(
                        f"the zstd body inflates to more than {limit // MIB} MiB (--max-inflated-mb)"
                    )
                out.write(chunk)
    except zstandard.ZstdError as error:
        raise BadRequest(f"the body is not valid zstd: {error}") from None
    return out.getvalue()


class Guard:
    """ASGI middleware: API key, body size, decompression, added latency."""

    def __init__(self, app: ASGIApp, api_key: str | None, limits: Limits, latency_ms: float = 0.0):
        self.app = app
        self.key = api_key.encode() if api_key is not None else None
        self.limits = limits
        self.latency_s = latency_ms / 1000

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            if self.key is not None and not key_matches(headers.get(b"x-api-key"), self.key):
                raise Unauthorized("invalid API key")
            body = await self._read_body(headers, receive)
        except ServiceError as error:
            await JSONResponse({"detail": error.detail}, status_code=error.status)(scope, receive, send)
            return
        except _ClientGone:
            return
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        if body is None:
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        scope["headers"] = [
            (name, value)
            for name, value in scope["headers"]
            if name not in (b"content-encoding", b"content-length")
        ] + [(b"content-length", str(len(body)).encode())]
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes | None:
        """The whole body within the limits; ``None`` for a request that has none."""
        limit = self.limits.max_body_bytes
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                raise BadRequest("invalid Content-Length")
            if int(declared) > limit:
                raise PayloadTooLarge(
                    f"the body has {int(declared)} bytes, over {limit // MIB} MiB (--max-body-mb)"
                )
        elif b"transfer-encoding" not in headers:
            return None
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            body += message.get("body", b"")
            if len(body) > limit:
                raise PayloadTooLarge(f"the body is over {limit // MIB} MiB (--max-body-mb)")
            if not message.get("more_body", False):
                break
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding == b"zstd":
            return inflate_zstd(bytes(body), self.limits.max_inflated_bytes)
        if encoding not in (b"identity", b""):
            raise UnsupportedMediaType(f"Content-Encoding {encoding.decode('latin-1')!r} is not supported")
        return bytes(body)


class _ClientGone(Exception):
    pass


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """Header names (lower case, as ASGI gives them) to the first value sent."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name, value)
    return found


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            message: dict[str, Any] = {"type": "http.request", "body": body, "more_body": False}
            return message
        return await receive()  # after the body: only http.disconnect

    return replay
