"""The server's state: sessions, training clients, samplers, futures, and the engine thread.

Everything here runs on the event loop, except the engine calls, which go to the engine thread
of the :class:`~rtc.server.scheduler.Scheduler` (:meth:`TinkerService.on_engine` for jobs,
:meth:`TinkerService.spawn_sample` for sampling, which the scheduler batches across requests),
so torch work never blocks HTTP and the engine never sees two operations at once. Registries
are only changed on the event loop: work that creates a client or a sampler hands its
bookkeeping back through :attr:`Outcome.then`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import HTTPException

from .engine import Engine, EngineUserError
from .futures import FutureStore, OrderedLane, Outcome
from .losses import LossInputError
from .protocol import ProtocolError, encode_sample, expect
from .sampling import SamplingRequest
from .scheduler import Scheduler, WorkCancelled
from .state import CheckpointNotFoundError, CheckpointPathError, CheckpointStore

log = logging.getLogger("rtc.serve")
MAX_SAMPLER_ADAPTERS = 16
SESSION_TIMEOUT_S = 600
SESSION_CHECK_S = 60


@dataclass
class ServerOptions:
    """What ``rtc serve`` was started with."""

    model_dir: Path
    model_description: str
    state_dir: Path
    api_key: str | None = None
    latency_ms: float = 0.0


@dataclass
class Session:
    """One ``ServiceClient``; its clients and samplers are freed when it finishes or goes silent."""

    session_id: str
    created: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    finished: bool = False


@dataclass
class TrainingRun:
    """A training client: a LoRA adapter of the engine and the lane that orders its requests."""

    model_id: str
    session_id: str
    base_model: str
    adapter: str
    rank: int
    lane: OrderedLane = field(default_factory=OrderedLane)

    @property
    def run_id(self) -> str:
        # tinker:// paths split on '/', and ':' reads like a port to URL parsers.
        return self.model_id.replace(":", "_")


@dataclass
class Sampler:
    """A sampling session: the base model (``adapter`` None) or a frozen adapter."""

    sampler_id: str
    session_id: str
    base_model: str
    adapter: str | None
    model_path: str | None = None
    last_used: float = field(default_factory=time.monotonic)
    evicted: bool = False


def tokenizer_location(model_dir: Path) -> str:
    """The model directory spelled so the SDK's tokenizer loader takes it as a path.

    The SDK reads a name with exactly two '/' as ``org/model/variant`` and keeps only the first
    two parts; an extra ``/./`` segment names the same directory with a third slash.
    """
    text = str(model_dir)
    if text.count("/") == 2:
        head, tail = text.rsplit("/", 1)
        text = f"{head}/./{tail}"
    return text


class TinkerService:
    """Sessions, training clients, samplers and futures; all methods run on the event loop."""

    def __init__(self, engine: Engine, options: ServerOptions):
        self.engine = engine
        self.options = options
        self.store = CheckpointStore(options.state_dir)
        self.futures = FutureStore()
        self.sessions: dict[str, Session] = {}
        self.runs: dict[str, TrainingRun] = {}
        self.samplers: dict[str, Sampler] = {}
        self.scheduler = Scheduler(engine)
        self._names = itertools.count(1)
        self._announced: set[str] = set()

    # ----- plumbing -----------------------------------------------------------------------

    def close(self) -> None:
        for run in self.runs.values():
            run.lane.close()
        self.scheduler.close()

    async def on_engine(self, fn: Callable[..., Any], *args: Any, owner: str | None = None) -> Any:
        return await asyncio.wrap_future(self.scheduler.submit(fn, *args, owner=owner))

    def _outcome_of(self, fn: Callable[[], Outcome]) -> Callable[[], Outcome]:
        """Wrap engine work so that every exception becomes a failed outcome, never a crash."""

        def run() -> Outcome:
            try:
                return fn()
            except (
                EngineUserError,
                LossInputError,
                CheckpointPathError,
                CheckpointNotFoundError,
                WorkCancelled,
            ) as error:
                return Outcome(error=str(error), category="user")
            except Exception as error:
                log.exception("engine error")
                return Outcome(error=f"engine error: {type(error).__name__}: {error}", category="server")

        return run

    async def _finish(self, request_id: str, work: Callable[[], Outcome], owner: str | None = None) -> None:
        try:
            outcome = await self.on_engine(self._outcome_of(work), owner=owner)
        except WorkCancelled as error:
            outcome = Outcome(error=str(error), category="user")
        if outcome.then is not None and outcome.error is None:
            pending = outcome.then()
            if inspect.isawaitable(pending):
                await pending
        self.futures.resolve(request_id, outcome)

    def spawn(self, work: Callable[[], Outcome], owner: str | None = None) -> str:
        """Queue work on the engine thread now; returns the request id to poll."""
        request_id = self.futures.create()
        asyncio.get_running_loop().create_task(self._finish(request_id, work, owner))
        return request_id

    def ordered(self, run: TrainingRun, seq_id: int, work: Callable[[], Outcome]) -> str:
        """Queue work behind the training client's earlier requests (by ``seq_id``)."""
        request_id = self.futures.create()
        run.lane.submit(seq_id, lambda: self._finish(request_id, work, run.session_id))
        return request_id

    def spawn_sample(self, request: SamplingRequest, adapter: str | None, owner: str | None) -> str:
        """Queue a sample request; the scheduler decodes it batched with others of the same weights."""
        request_id = self.futures.create()

        async def finish() -> None:
            try:
                result = await asyncio.wrap_future(self.scheduler.sample(request, adapter, owner))
                outcome = Outcome(proto=encode_sample(result))
            except (EngineUserError, WorkCancelled) as error:
                outcome = Outcome(error=str(error), category="user")
            except Exception as error:
                log.exception("sampling error")
                outcome = Outcome(error=f"engine error: {type(error).__name__}: {error}", category="server")
            self.futures.resolve(request_id, outcome)

        asyncio.get_running_loop().create_task(finish())
        return request_id

    async def add_sampler(self, sampler: Sampler) -> None:
        """Register a sampler; drop the least recently used sampler adapters beyond the cap.

        A loop that makes a sampler of its current weights every step would otherwise keep
        every snapshot in memory for the life of the server.
        """
        self.samplers[sampler.sampler_id] = sampler
        with_adapter = [s for s in self.samplers.values() if s.adapter is not None and not s.evicted]
        excess = len(with_adapter) - MAX_SAMPLER_ADAPTERS
        for old in sorted(with_adapter, key=lambda s: s.last_used)[: max(0, excess)]:
            old.evicted = True
            await self.on_engine(self.engine.delete_adapter, old.adapter)
            log.info("evicted sampler %s (over %d sampler adapters)", old.sampler_id, MAX_SAMPLER_ADAPTERS)

    async def finish(self, session: Session) -> None:
        """Free a session's training clients and samplers.

        Requests still queued for them fail with "training client ... is gone" rather than
        hanging, because their lanes keep running and the engine no longer knows the adapter.
        """
        if session.finished:
            return
        session.finished = True
        self.scheduler.cancel(session.session_id)
        runs = [r for r in self.runs.values() if r.session_id == session.session_id]
        samplers = [s for s in self.samplers.values() if s.session_id == session.session_id]
        for run in runs:
            del self.runs[run.model_id]
        for sampler in samplers:
            del self.samplers[sampler.sampler_id]
        adapters = [r.adapter for r in runs] + [s.adapter for s in samplers if s.adapter and not s.evicted]
        for adapter in adapters:
            await self.on_engine(self.engine.delete_adapter, adapter)

    async def reap_silent_sessions(self) -> None:
        """Finish sessions whose client stopped heartbeating (the SDK beats every 10 s).

        Loops rarely call ``sessions/{id}/finish``; without this, a long-lived server would keep
        every adapter and optimizer state of every loop that ever ran against it.
        """
        while True:
            await asyncio.sleep(SESSION_CHECK_S)
            cutoff = time.time() - SESSION_TIMEOUT_S
            for session in [
                s for s in self.sessions.values() if not s.finished and s.last_heartbeat < cutoff
            ]:
                log.info(
                    "session %s sent no heartbeat for %d s; freeing it", session.session_id, SESSION_TIMEOUT_S
                )
                await self.finish(session)

    def new_name(self, prefix: str) -> str:
        return f"{prefix}{next(self._names)}"

    def announce(self, base_model: str) -> None:
        if base_model not in self._announced:
            self._announced.add(base_model)
            log.info(
                "base_model %r is served by the local model: %s", base_model, self.options.model_description
            )

    def session(self, session_id: Any) -> Session:
        session_id = expect(session_id, str, "session_id")
        session = self.sessions.get(session_id)
        if session is None:
            raise HTTPException(404, f"unknown session_id {session_id!r}")
        if session.finished:
            raise HTTPException(410, f"session {session_id} has finished")
        return session

    def run(self, model_id: Any) -> TrainingRun:
        model_id = expect(model_id, str, "model_id")
        run = self.runs.get(model_id)
        if run is None:
            raise HTTPException(404, f"unknown model_id {model_id!r}")
        return run

    def sampler(self, sampler_id: Any) -> Sampler:
        sampler_id = expect(sampler_id, str, "sampling_session_id")
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            raise HTTPException(404, f"unknown sampling_session_id {sampler_id!r}")
        if sampler.evicted:
            raise HTTPException(
                410,
                f"sampler {sampler_id} was evicted to free memory (more than {MAX_SAMPLER_ADAPTERS} "
                "sampler adapters); create a new sampling client",
            )
        sampler.last_used = time.monotonic()
        return sampler

    def check_tokens(self, tokens: list[int], where: str) -> None:
        if not tokens:
            raise ProtocolError(f"{where}: the model input is empty")
        vocab = self.engine.vocab_size
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise ProtocolError(f"{where}: token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
        if len(tokens) > self.engine.max_length:
            raise ProtocolError(
                f"{where}: {len(tokens)} tokens exceed the context of {self.engine.max_length}"
            )

    def new_run(self, session_id: str, model_seq_id: int, base_model: str, rank: int) -> TrainingRun:
        """A training client record; it is registered once its adapter exists."""
        model_id = f"{session_id}:train:{model_seq_id}"
        if model_id in self.runs:
            raise HTTPException(409, f"model {model_id} already exists")
        return TrainingRun(model_id, session_id, base_model, self.new_name("train_"), rank)

    def register(self, run: TrainingRun) -> None:
        self.runs[run.model_id] = run

    def training_info(self, run: TrainingRun) -> dict[str, Any]:
        return {
            "type": "get_info",
            "model_id": run.model_id,
            "model_name": run.base_model,
            "is_lora": True,
            "lora_rank": run.rank,
            "model_data": {
                "model_name": run.base_model,
                "arch": self.engine.arch,
                "tokenizer_id": tokenizer_location(self.options.model_dir),
            },
        }
