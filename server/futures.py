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
"""

from __future__ import annotations

import asyncio
import itertools
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
    then: Callable[[], None] | None = None


@dataclass
class _Entry:
    future: asyncio.Future[Outcome]
    created: float = field(default_factory=time.monotonic)


class FutureStore:
    """Request ids and their outcomes; lives on the event loop."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._counter = itertools.count(1)

    def create(self) -> str:
        self._forget_old()
        request_id = f"req-{next(self._counter)}"
        self._entries[request_id] = _Entry(asyncio.get_running_loop().create_future())
        return request_id

    def resolve(self, request_id: str, outcome: Outcome) -> None:
        entry = self._entries.get(request_id)
        if entry is not None and not entry.future.done():
            entry.future.set_result(outcome)

    def known(self, request_id: str) -> bool:
        return request_id in self._entries

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
