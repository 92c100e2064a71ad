"""Futures the SDK polls, and per-training-client ordering of their work.

Every long operation answers at once with a ``request_id``; its result is fetched with
``retrieve_future``. Rather than answering "try again" immediately and making the client spin,
``retrieve_future`` holds the request until the result is ready or :data:`LONG_POLL_S` has
passed. The SDK waits 45 s for that call, so the hold stays well below it.

Requests of one training client must run in ``seq_id`` order even though the SDK sends the
chunks of a large ``forward_backward`` in parallel, so they may arrive shuffled. Each client
has an :class:`OrderedLane`: work waits until every lower ``seq_id`` has run. A ``seq_id`` that
never arrives (a client that gave up on a request) is skipped after :data:`GAP_WAIT_S`, so a
lost request delays a client instead of wedging it.

Request ids are 128 random bits (:func:`secrets.token_hex`), and each future records the
session it belongs to: a request id is the only thing ``retrieve_future`` is given, so it must
not be guessable (ids used to be ``req-1``, ``req-2``, ..., and any client could read any
other's results). A result is serialised once, when it is ready; one that cannot be (a metric
that came out NaN) becomes an error result instead of failing every poll.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

LONG_POLL_S = 30.0
GAP_WAIT_S = 5.0
KEEP_RESULTS_S = 30 * 60


@dataclass
class Outcome:
    """What ``retrieve_future`` answers once the work is done."""

    json: dict[str, Any] | None = None
    proto: bytes | None = None
    error: str | None = None
    category: str = "server"  # "user" for errors caused by the request
    # Bookkeeping to run on the event loop once the engine is done (registering a new client
    # or sampler), so the registries are only ever touched from one thread.
    then: Callable[[], Any] | None = None
    body: bytes | None = None  # the JSON, serialised by sealed()

    def sealed(self) -> Outcome:
        """This outcome with its JSON serialised now, or an error outcome if it cannot be.

        Starlette refuses NaN and infinity in JSON; finding that out on every poll would answer
        each one with a 500, which the SDK retries until it gives up.
        """
        if self.json is None or self.error is not None:
            return self
        try:
            body = json.dumps(self.json, allow_nan=False, separators=(",", ":")).encode()
        except (ValueError, TypeError) as error:
            return Outcome(
                error=f"the result could not be encoded as JSON ({error}); "
                "a non-finite number usually means the weights diverged (learning rate too high?)",
                category="server",
            )
        return Outcome(json=self.json, body=body)


@dataclass
class _Entry:
    future: asyncio.Future[Outcome]
    owner: str
    created: float = field(default_factory=time.monotonic)


class FutureStore:
    """Request ids, the session each belongs to, and their outcomes; lives on the event loop."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def create(self, owner: str) -> str:
        self._forget_old()
        request_id = f"req-{secrets.token_hex(16)}"
        self._entries[request_id] = _Entry(asyncio.get_running_loop().create_future(), owner)
        return request_id

    def resolve(self, request_id: str, outcome: Outcome) -> None:
        entry = self._entries.get(request_id)
        if entry is not None and not entry.future.done():
            entry.future.set_result(outcome.sealed())

    def known(self, request_id: str) -> bool:
        return request_id in self._entries

    def pending(self, owner: str) -> int:
        """How many of ``owner``'s requests are not done yet."""
        return sum(1 for e in self._entries.values() if e.owner == owner and not e.future.done())

    def forget(self, owner: str) -> None:
        """Drop every finished result of ``owner`` (a session that finished)."""
        for request_id in [r for r, e in self._entries.items() if e.owner == owner and e.future.done()]:
            del self._entries[request_id]

    async def wait(self, request_id: str, timeout: float = LONG_POLL_S) -> Outcome | None:
        """The outcome, or ``None`` if it is not ready within ``timeout`` seconds."""
        entry = self._entries[request_id]
        try:
            return await asyncio.wait_for(asyncio.shield(entry.future), timeout)
        except TimeoutError:
            return None

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - KEEP_RESULTS_S
        stale = [rid for rid, e in self._entries.items() if e.future.done() and e.created < cutoff]
        for request_id in stale:
            del self._entries[request_id]


Job = Callable[[], Awaitable[None]]


class OrderedLane:
    """Runs one training client's jobs one at a time, in ``seq_id`` order."""

    def __init__(self, first_seq_id: int = 1) -> None:
        self._pending: dict[int, Job] = {}
        self._next = first_seq_id
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, seq_id: int, job: Job) -> None:
        self._pending[seq_id] = job
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._pump())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _pump(self) -> None:
        gap_deadline: float | None = None
        while self._pending:
            lowest = min(self._pending)
            if lowest > self._next:
                # A lower seq_id is still on its way; give it a moment before skipping it.
                now = time.monotonic()
                gap_deadline = gap_deadline or now + GAP_WAIT_S
                if now < gap_deadline:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), gap_deadline - now)
                    except TimeoutError:
                        pass
                    continue
            gap_deadline = None
            job = self._pending.pop(lowest)
            self._next = max(self._next, lowest + 1)
            await job()
