"""The server's state: sessions, training clients, samplers, futures, and the engine thread.

Everything here runs on the event loop, except the engine calls, which go to the engine thread
of the :class:`~rtc.server.scheduler.Scheduler` (:meth:`TinkerService.on_engine` for jobs,
:meth:`TinkerService._submit_sampling` for sampling, which the scheduler batches across
requests), so torch work never blocks HTTP and the engine never sees two operations at once.
Registries are only changed on the event loop: work that creates a client or a sampler hands its
bookkeeping back through :attr:`Outcome.then`.

Methods take requests already validated at the edge (:mod:`rtc.server.requests`, the protobuf
decoder) and raise :class:`~rtc.server.errors.ServiceError`; this layer knows nothing of HTTP.

Who owns what, and how a request proves it
------------------------------------------
The SDK identifies its caller with one thing only, the ``X-API-Key`` header, and every client of
this server sends the same key: it says "may use this server", not who is asking. What a
request can prove is that it holds an id, so ids are capabilities:

- Every id the server gives out holds 128 random bits from :mod:`secrets`: sessions
  (``rtc-...``), requests (``req-...``), samplers (``smp-...``) and the run id inside each
  ``tinker://`` path (``rtc-run-...``; ``rtc export`` knows local checkpoints by ``rtc-``).
  Each is handed only to the session that created the object, in the reply to that session's
  own request; nothing lists sessions, models or futures, and no reply names another
  session's object. Holding an id is the proof of having been given it.
- A model id is ``<session id>:train:<n>``, because the SDK derives it that way for
  ``load_weights``; it is exactly as unguessable as the session id in it.
- A checkpoint path carries its own random run id, never the session or model id, so a path
  printed in a log or shared with a teammate lets its holder load those weights (a resumed
  loop in a new session must be able to) and nothing more: it cannot train, sample with or
  finish the session that wrote it. Writes go only under the writer's own run id.
- Every future, training client and sampler records its session. Finishing a session (which
  takes its id) frees its adapters, drops its queued work and its results; its objects then
  answer 410 or 404. Adapter quotas are per session, and making room evicts only the asking
  session's own samplers, so one client cannot push out another's.

This does not protect against a process that can read a client's memory or environment (where
the key and the ids are): that is the sandbox's job (``templates/verifiers/code.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import protocol, requests
from .engine import Engine, EngineUserError
from .errors import BadRequest, Conflict, Gone, LimitExceeded, NotFound, QuotaExceeded, ServiceError
from .futures import FutureStore, OrderedLane, Outcome
from .limits import Limits
from .losses import LossInputError, check_inputs, check_loss
from .models import PreparedModel
from .sampling import DEFAULT_MAX_TOKENS, SamplingRequest
from .scheduler import Scheduler, WorkCancelled
from .state import CheckpointRef, CheckpointStore, check_name

log = logging.getLogger("rtc.serve")
SESSION_TIMEOUT_S = 600
SESSION_CHECK_S = 60
KEEP_FINISHED_S = 3600  # a finished session answers 410 this long, then 404
MAX_QUEUED_PER_SESSION = 1024  # requests of one session not done yet
MAX_ANNOUNCED = 64  # distinct base-model names logged


def new_id(prefix: str) -> str:
    """An unguessable id: 128 random bits."""
    return f"{prefix}{secrets.token_hex(16)}"


@dataclass
class ServerOptions:
    """What ``rtc serve`` was started with."""

    model_dir: Path
    model_description: str
    state_dir: Path
    api_key: str | None = None
    latency_ms: float = 0.0
    limits: Limits = field(default_factory=Limits)
    # Who the model is (its own name, its family); None: a directory, named by its path.
    model: PreparedModel | None = None


@dataclass
class Session:
    """One ``ServiceClient``; its clients and samplers are freed when it finishes or goes silent."""

    session_id: str
    created: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    finished: bool = False
    finished_at: float = 0.0
    pending_adapters: int = 0  # adapters being created, counted against the quotas


@dataclass
class TrainingRun:
    """A training client: a LoRA adapter of the engine and the lane that orders its requests."""

    model_id: str
    session_id: str
    base_model: str
    adapter: str
    rank: int
    # The directory its checkpoints go under: random, so a tinker:// path names nothing else.
    run_id: str = field(default_factory=lambda: new_id("rtc-run-"))
    lane: OrderedLane = field(default_factory=OrderedLane)


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


def reported_model(model: PreparedModel, base_model: str) -> tuple[str, str]:
    """What ``get_info`` says a training client of ``base_model`` trains: (model_name, tokenizer_id).

    A loop picks its chat format from ``model_name`` and ``get_tokenizer()`` loads ``tokenizer_id``.

    - A model that serves any name (``tiny``, ``smollm2``, a directory) reports its own name
      (``HuggingFaceTB/SmolLM2-135M-Instruct``), never the requested one: its tokenizer is not the
      requested family's, so a loop must use the served tokenizer's own chat template, not the
      card's family format. ``tokenizer_id`` is the local directory, so ``get_tokenizer()``
      works offline.
    - A family model reports the requested name: its vocabulary and special tokens are that
      family's. ``tiny-llama3`` reports its local tokenizer directory (loaded offline). A tml
      family (``tiny-qwen3``, ...) reports the requested name, as the hosted service does: its
      model directory holds no Hugging Face tokenizer (tml-renderers' tokenizers are native code,
      and the Hugging Face one cannot be downloaded here), so ``get_tokenizer()`` works only
      where the hub is reachable, and then gives the same ids; loops for these families tokenize
      with tml-renderers and never call it.
    """
    family = model.family
    if family is None:
        return model.name, tokenizer_location(model.path)
    if family.tokenizer is None:
        return base_model, tokenizer_location(model.path)
    return base_model, base_model


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Errors of the loss and engine modules that a request caused, as 400s."""
    try:
        yield
    except (LossInputError, EngineUserError) as error:
        raise BadRequest(str(error)) from None


class TinkerService:
    """Sessions, training clients, samplers and futures; all methods run on the event loop."""

    def __init__(self, engine: Engine, options: ServerOptions):
        self.engine = engine
        self.options = options
        self.limits = options.limits
        self.model = options.model or PreparedModel(
            options.model_dir, options.model_description, str(options.model_dir)
        )
        self.store = CheckpointStore(options.state_dir)
        self.futures = FutureStore()
        self.sessions: dict[str, Session] = {}
        self.runs: dict[str, TrainingRun] = {}
        self.samplers: dict[str, Sampler] = {}
        self.scheduler = Scheduler(engine)
        self._names = itertools.count(1)
        self._announced: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ----- the engine thread --------------------------------------------------------------

    def close(self) -> None:
        for run in self.runs.values():
            run.lane.close()
        self.scheduler.close()

    async def on_engine(self, fn: Callable[..., Any], *args: Any, owner: str | None = None) -> Any:
        return await asyncio.wrap_future(self.scheduler.submit(fn, *args, owner=owner))

    @staticmethod
    def _outcome_of(fn: Callable[[], Outcome]) -> Callable[[], Outcome]:
        """Wrap engine work so that every exception becomes a failed outcome, never a crash."""

        def run() -> Outcome:
            try:
                return fn()
            except ServiceError as error:
                return Outcome(error=error.detail, category=error.category)
            except (EngineUserError, LossInputError, WorkCancelled) as error:
                return Outcome(error=str(error), category="user")
            except Exception as error:
                log.exception("engine error")
                return Outcome(error=f"engine error: {type(error).__name__}: {error}", category="server")

        return run

    async def _finish(
        self,
        request_id: str,
        session_id: str,
        work: Callable[[], Outcome],
        settle: Callable[[], None] | None = None,
    ) -> None:
        """Run ``work`` unless its session has gone, ``settle`` whatever happened, resolve."""
        try:
            session = self.sessions.get(session_id)
            if session is None or session.finished:
                outcome = Outcome(
                    error=f"session {session_id} has finished; its queued work was dropped", category="user"
                )
            else:
                try:
                    outcome = await self.on_engine(self._outcome_of(work), owner=session_id)
                except WorkCancelled as error:  # its session finished while it waited
                    outcome = Outcome(error=str(error), category="user")
            if outcome.then is not None and outcome.error is None:
                pending = outcome.then()
                if inspect.isawaitable(pending):
                    await pending
        except Exception as error:  # bookkeeping failed: still answer the future
            log.exception("request %s failed", request_id)
            outcome = Outcome(error=f"{type(error).__name__}: {error}", category="server")
        finally:
            if settle is not None:
                settle()
        self.futures.resolve(request_id, outcome)

    def _background(self, coroutine: Any) -> None:
        """Run ``coroutine`` as a task the event loop keeps a reference to until it is done."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _queue_slot(self, session: Session) -> None:
        if self.futures.pending(session.session_id) >= MAX_QUEUED_PER_SESSION:
            raise LimitExceeded(
                f"session {session.session_id} has {MAX_QUEUED_PER_SESSION} requests in flight; "
                "wait for some to finish"
            )

    def _spawn(
        self, session: Session, work: Callable[[], Outcome], settle: Callable[[], None] | None = None
    ) -> str:
        """Queue work that belongs to no training client (creating one, sampling) now."""
        try:
            self._queue_slot(session)
        except ServiceError:
            if settle is not None:
                settle()
            raise
        request_id = self.futures.create(session.session_id)
        self._background(self._finish(request_id, session.session_id, work, settle))
        return request_id

    def _submit_training(
        self,
        run: TrainingRun,
        seq_id: int,
        work: Callable[[], Outcome],
        settle: Callable[[], None] | None = None,
    ) -> str:
        """The one place training work is queued: behind the client's earlier requests."""
        try:
            self._queue_slot(self.session(run.session_id))
        except ServiceError:
            if settle is not None:
                settle()
            raise
        request_id = self.futures.create(run.session_id)
        run.lane.submit(seq_id, lambda: self._finish(request_id, run.session_id, work, settle))
        return request_id

    def _submit_sampling(self, session: Session, adapter: str | None, request: SamplingRequest) -> str:
        """The one place sampling work is queued; the scheduler decodes it batched with the requests
        of the same weights that arrive with it. Every way it can end resolves its future."""
        self._queue_slot(session)
        request_id = self.futures.create(session.session_id)

        async def finish() -> None:
            try:
                sample = self.scheduler.sample(request, adapter, session.session_id)
                outcome = Outcome(proto=protocol.encode_sample(await asyncio.wrap_future(sample)))
            except (EngineUserError, WorkCancelled) as error:
                outcome = Outcome(error=str(error), category="user")
            except Exception as error:
                log.exception("sampling error")
                outcome = Outcome(error=f"engine error: {type(error).__name__}: {error}", category="server")
            self.futures.resolve(request_id, outcome)

        self._background(finish())
        return request_id

    # ----- lookups: an id is the proof of ownership (see the module docstring) ------------

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"unknown session_id {session_id!r}")
        if session.finished:
            raise Gone(f"session {session_id} has finished")
        return session

    def run(self, model_id: str) -> TrainingRun:
        run = self.runs.get(model_id)
        if run is None:
            raise NotFound(f"unknown model_id {model_id!r}")
        return run

    def sampler(self, sampler_id: str) -> Sampler:
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            raise NotFound(f"unknown sampling_session_id {sampler_id!r}")
        if sampler.evicted:
            raise Gone(
                f"sampler {sampler_id} was evicted to make room for a newer one of its session "
                f"(--max-adapters-per-session {self.limits.max_adapters_per_session}); "
                "create a new sampling client"
            )
        sampler.last_used = time.monotonic()
        return sampler

    # ----- adapter quotas -----------------------------------------------------------------

    def _adapters_held(self, session_id: str | None = None) -> int:
        """Training clients and sampler adapters, live or being created (of one session)."""

        def mine(owner: str) -> bool:
            return session_id is None or owner == session_id

        runs = sum(1 for r in self.runs.values() if mine(r.session_id))
        samplers = sum(
            1
            for s in self.samplers.values()
            if s.adapter is not None and not s.evicted and mine(s.session_id)
        )
        pending = sum(s.pending_adapters for s in self.sessions.values() if mine(s.session_id))
        return runs + samplers + pending

    def _reserve_adapter(self, session: Session) -> Callable[[], None]:
        """Count one more adapter for ``session``, or refuse; returns the release.

        At a limit, the session's own least recently used sampler adapters make room (a loop
        that snapshots its weights every step keeps the newest); never another session's.
        """
        limits = self.limits
        while True:
            mine = self._adapters_held(session.session_id)
            total = self._adapters_held()
            if mine < limits.max_adapters_per_session and total < limits.max_adapters:
                break
            if not self._evict_oldest_sampler(session):
                if mine >= limits.max_adapters_per_session:
                    raise QuotaExceeded(
                        f"session {session.session_id} holds {mine} adapters (training clients and "
                        f"sampler weights), the most --max-adapters-per-session allows"
                    )
                raise QuotaExceeded(
                    f"the server holds {total} adapters, the most --max-adapters allows; "
                    "finish sessions you no longer need (ServiceClient.close) or restart rtc serve"
                )
        session.pending_adapters += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                session.pending_adapters -= 1

        return release

    def _evict_oldest_sampler(self, session: Session) -> bool:
        candidates = [
            s
            for s in self.samplers.values()
            if s.session_id == session.session_id and s.adapter is not None and not s.evicted
        ]
        if not candidates:
            return False
        oldest = min(candidates, key=lambda s: s.last_used)
        oldest.evicted = True
        self._free_adapter_later(oldest.adapter)
        log.info("evicted sampler %s to make room in its session", oldest.sampler_id)
        return True

    def _free_adapter_later(self, adapter: str | None) -> None:
        if adapter is not None:
            # The engine thread runs jobs in order, so the adapter is gone before later work.
            self._background(self.on_engine(self.engine.delete_adapter, adapter))

    def _adapter_name(self, prefix: str) -> str:
        """An engine-internal adapter name; never shown to clients."""
        return f"{prefix}{next(self._names)}"

    def _load_or_free(self, load: Callable[[], None], adapter: str) -> None:
        """Run ``load`` on the engine thread; if it fails, free what it allocated."""
        try:
            load()
        except BaseException:
            self.engine.delete_adapter(adapter)
            raise

    # ----- sessions -----------------------------------------------------------------------

    def client_config(self) -> dict[str, Any]:
        return {
            "use_pyqwest_transport": False,
            "sample_use_retrieve_futures": False,
            "proto_compress_fwdbwd": False,
            "parallel_fwdbwd_chunks": True,
            "sample_join_sampling_session": False,
            "custom_loss_server_side": False,
            # Keep the SDK's forward_backward chunks inside the body and token limits.
            "fwdbwd_max_chunk_bytes_count": self.limits.fwdbwd_chunk_bytes(),
        }

    def create_session(self) -> str:
        session = Session(new_id("rtc-"))
        self.sessions[session.session_id] = session
        return session.session_id

    def heartbeat(self, session_id: str) -> None:
        self.session(session_id).last_heartbeat = time.time()

    async def finish_session(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFound(f"unknown session_id {session_id!r}")
        await self.finish(session)

    async def finish(self, session: Session) -> None:
        """Free a session's training clients and samplers and drop its queued work.

        Requests still queued for it resolve with an error without running (``_finish``
        checks the session before each one reaches the engine).
        """
        if session.finished:
            return
        session.finished = True
        session.finished_at = time.time()
        self.scheduler.cancel(session.session_id)
        runs = [r for r in self.runs.values() if r.session_id == session.session_id]
        samplers = [s for s in self.samplers.values() if s.session_id == session.session_id]
        for run in runs:
            del self.runs[run.model_id]
        for sampler in samplers:
            del self.samplers[sampler.sampler_id]
        self.futures.forget(session.session_id)
        adapters = [r.adapter for r in runs] + [s.adapter for s in samplers if s.adapter and not s.evicted]
        for adapter in adapters:
            await self.on_engine(self.engine.delete_adapter, adapter)

    async def reap_silent_sessions(self) -> None:
        """Finish sessions whose client stopped heartbeating (the SDK beats every 10 s).

        Loops rarely call ``sessions/{id}/finish``; without this, a long-lived server would keep
        every adapter and optimizer state of every loop that ever ran against it. Finished
        sessions are forgotten after :data:`KEEP_FINISHED_S`.
        """
        while True:
            await asyncio.sleep(SESSION_CHECK_S)
            now = time.time()
            for session in list(self.sessions.values()):
                if not session.finished and session.last_heartbeat < now - SESSION_TIMEOUT_S:
                    log.info(
                        "session %s sent no heartbeat for %d s; freeing it",
                        session.session_id,
                        SESSION_TIMEOUT_S,
                    )
                    await self.finish(session)
                elif session.finished and session.finished_at < now - KEEP_FINISHED_S:
                    del self.sessions[session.session_id]

    def announce(self, base_model: str) -> None:
        """Accept a requested base model, or refuse it (400) when a family model cannot serve it.

        A model that serves any name says once in the log which local model serves it.
        """
        refusal = self.model.refusal(base_model)
        if refusal is not None:
            raise BadRequest(refusal)
        if base_model not in self._announced and len(self._announced) < MAX_ANNOUNCED:
            self._announced.add(base_model)
            log.info(
                "base_model %r is served by the local model: %s", base_model, self.options.model_description
            )

    def capabilities(self) -> dict[str, Any]:
        """The served model, with the context length a loop checks its rows against.

        The server serves every requested base model name with this one model, so a client
        that does not find its base model by name should read the single entry.
        """
        return {
            "supported_models": [
                {
                    "model_name": name,
                    "max_context_length": self.engine.max_length,
                    "trainable": True,
                    "sampleable": True,
                }
                for name in self.supported_models()
            ]
        }

    def supported_models(self) -> list[str]:
        """The names ``get_server_capabilities`` lists: a family model's catalog names, else its own."""
        if self.model.family is not None:
            return self.model.family.served_names()
        return [self.model.name]

    def sampler_base_model(self, sampler: Sampler) -> str:
        """What ``GET samplers/{id}`` reports as ``base_model`` (the SDK asks for a sampler made
        from a ``model_path``; ``SamplingClient.get_base_model()`` returns it and
        ``get_tokenizer()`` loads it).

        A family model names the sampler's base model (from its checkpoint), as ``get_info``
        does: a sampler of the current weights gets that name from ``get_info`` anyway. A model
        that serves any name gives its local directory, so ``get_tokenizer()`` works offline.
        """
        if self.model.family is None:
            return tokenizer_location(self.model.path)
        if sampler.model_path is None:
            return sampler.base_model
        directory = self.store.existing(sampler.model_path)
        with user_errors():
            saved = self.engine.checkpoint_info(directory).get("base_model")
        return str(saved or sampler.base_model)

    # ----- futures ------------------------------------------------------------------------

    async def retrieve(self, request_id: str) -> Outcome | None:
        """The request's outcome, or ``None`` if it is not ready within the long poll."""
        if not self.futures.known(request_id):
            raise NotFound(f"unknown request_id {request_id!r}")
        return await self.futures.wait(request_id)

    # ----- training -----------------------------------------------------------------------

    def _new_model_id(self, session: Session, model_seq_id: int) -> str:
        model_id = f"{session.session_id}:train:{model_seq_id}"
        if model_id in self.runs:
            raise Conflict(f"model {model_id} already exists")
        return model_id

    def _adopt_run(self, run: TrainingRun) -> None:
        session = self.sessions.get(run.session_id)
        if session is None or session.finished:
            self._free_adapter_later(run.adapter)  # finished while the adapter was being made
            return
        self.runs[run.model_id] = run

    def create_model(self, body: requests.CreateModel) -> dict[str, Any]:
        session = self.session(body.session_id)
        model_id = self._new_model_id(session, body.model_seq_id)
        release = self._reserve_adapter(session)
        self.announce(body.base_model)
        run = TrainingRun(
            model_id, session.session_id, body.base_model, self._adapter_name("train_"), body.lora_config.rank
        )
        settings = protocol.lora_settings(body.lora_config)

        def work() -> Outcome:
            self._load_or_free(
                lambda: self.engine.create_training_adapter(run.adapter, settings), run.adapter
            )
            return Outcome(
                json={"type": "create_model", "model_id": model_id}, then=lambda: self._adopt_run(run)
            )

        return {"request_id": self._spawn(session, work, release), "model_id": model_id}

    def model_info(self, run: TrainingRun) -> dict[str, Any]:
        """``get_info``: what the SDK's ``TrainingClient.get_info`` and ``get_tokenizer`` read."""
        model_name, tokenizer_id = reported_model(self.model, run.base_model)
        return {
            "type": "get_info",
            "model_id": run.model_id,
            "model_name": model_name,
            "is_lora": True,
            "lora_rank": run.rank,
            "model_data": {"model_name": model_name, "arch": self.engine.arch, "tokenizer_id": tokenizer_id},
        }

    def get_info(self, model_id: str) -> dict[str, Any]:
        return self.model_info(self.run(model_id))

    def check_tokens(self, tokens: list[int], where: str) -> None:
        if not tokens:
            raise BadRequest(f"{where}: the model input is empty")
        vocab = self.engine.vocab_size
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise BadRequest(f"{where}: token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
        if len(tokens) > self.engine.max_length:
            raise BadRequest(f"{where}: {len(tokens)} tokens exceed the context of {self.engine.max_length}")

    def _check_request_tokens(self, count: int, what: str) -> None:
        if count > self.limits.max_request_tokens:
            raise LimitExceeded(
                f"{what} has {count} tokens, over --max-request-tokens {self.limits.max_request_tokens}; "
                "send fewer per request"
            )

    def forward_backward(self, call: protocol.ForwardBackwardCall) -> dict[str, Any]:
        run = self.run(call.model_id)
        with user_errors():
            spec = check_loss(call.loss_fn, call.loss_fn_config)
            if not call.data:
                raise BadRequest("forward_backward: data is empty")
            self._check_request_tokens(sum(len(d.tokens) for d in call.data), "forward_backward")
            for index, datum in enumerate(call.data):
                self.check_tokens(datum.tokens, f"datum {index}")
                check_inputs(spec, datum.inputs, len(datum.tokens), index)
                targets = datum.inputs["target_tokens"]
                if targets.numel() and not (
                    0 <= int(targets.min()) and int(targets.max()) < self.engine.vocab_size
                ):
                    raise BadRequest(f"datum {index}: target_tokens outside the vocabulary")

        def work() -> Outcome:
            result = self.engine.forward_backward(run.adapter, call.data, spec, call.forward_only)
            return Outcome(proto=protocol.encode_forward_backward(result, {"loss:sum": result.loss_sum}))

        return {"request_id": self._submit_training(run, call.seq_id, work), "model_id": run.model_id}

    def optim_step(self, body: requests.OptimStep) -> dict[str, Any]:
        run = self.run(body.model_id)
        params = protocol.adam_params(body.params)

        def work() -> Outcome:
            return Outcome(json={"metrics": self.engine.optim_step(run.adapter, params)})

        return {"request_id": self._submit_training(run, body.seq_id, work), "model_id": run.model_id}

    def save_weights(self, body: requests.SaveWeights) -> dict[str, Any]:
        run = self.run(body.model_id)
        ref = CheckpointRef(run.run_id, "weights", check_name(body.path))
        self.store.directory(ref)

        def work() -> Outcome:
            def fill(directory: Path) -> None:
                self.engine.save_adapter(run.adapter, directory, True, run.base_model)

            return Outcome(json={"type": "save_weights", "path": self.store.write(ref, fill)})

        return {"request_id": self._submit_training(run, body.seq_id, work), "model_id": run.model_id}

    def save_weights_for_sampler(self, body: requests.SaveWeightsForSampler) -> dict[str, Any]:
        run = self.run(body.model_id)
        if body.path is not None:
            ref = CheckpointRef(run.run_id, "sampler_weights", check_name(body.path))
            self.store.directory(ref)

            def save() -> Outcome:
                def fill(directory: Path) -> None:
                    self.engine.save_adapter(run.adapter, directory, False, run.base_model)

                return Outcome(json={"type": "save_weights_for_sampler", "path": self.store.write(ref, fill)})

            return {"request_id": self._submit_training(run, body.seq_id, save), "model_id": run.model_id}

        # No path: an ephemeral sampler of the current weights (save_weights_and_get_sampling_client).
        session = self.session(run.session_id)
        release = self._reserve_adapter(session)
        sampler = Sampler(new_id("smp-"), run.session_id, run.base_model, self._adapter_name("sample_"))

        def snapshot() -> Outcome:
            self._load_or_free(
                lambda: self.engine.snapshot_for_sampling(run.adapter, sampler.adapter), sampler.adapter
            )
            return Outcome(
                json={"type": "save_weights_for_sampler", "sampling_session_id": sampler.sampler_id},
                then=lambda: self._adopt_sampler(sampler),
            )

        request_id = self._submit_training(run, body.seq_id, snapshot, release)
        return {"request_id": request_id, "model_id": run.model_id}

    def _adopt_sampler(self, sampler: Sampler) -> None:
        session = self.sessions.get(sampler.session_id)
        if session is None or session.finished:
            self._free_adapter_later(sampler.adapter)
            return
        self.samplers[sampler.sampler_id] = sampler

    def load_weights(self, body: requests.LoadWeights) -> dict[str, Any]:
        directory = self.store.existing(body.path)
        if body.model_id is not None:
            return self._reload(self.run(body.model_id), body, directory)
        session = self.session(body.session_id)  # type: ignore[arg-type]
        model_id = self._new_model_id(session, body.model_seq_id)  # type: ignore[arg-type]
        if body.base_model is not None:
            self.announce(body.base_model)
            base_model = body.base_model
        else:
            with user_errors():
                saved = self.engine.checkpoint_info(directory).get("base_model")
            base_model = str(saved or self.options.model_description)
        release = self._reserve_adapter(session)
        run = TrainingRun(model_id, session.session_id, base_model, self._adapter_name("train_"), 0)

        def create() -> Outcome:
            self._load_or_free(
                lambda: self.engine.load_training_adapter(directory, run.adapter, body.optimizer), run.adapter
            )
            run.rank = self.engine.adapter_rank(run.adapter)
            return Outcome(
                json={"type": "load_weights", "path": body.path, "model_id": model_id},
                then=lambda: self._adopt_run(run),
            )

        return {"request_id": self._spawn(session, create, release), "model_id": model_id}

    def _reload(self, run: TrainingRun, body: requests.LoadWeights, directory: Path) -> dict[str, Any]:
        """The deprecated ``TrainingClient.load_state``: replace an existing client's weights."""

        def reload() -> Outcome:
            new = self._adapter_name("train_")
            self._load_or_free(lambda: self.engine.load_training_adapter(directory, new, body.optimizer), new)
            old, run.adapter = run.adapter, new
            self.engine.delete_adapter(old)
            return Outcome(json={"type": "load_weights", "path": body.path, "model_id": run.model_id})

        return {"request_id": self._submit_training(run, body.seq_id, reload), "model_id": run.model_id}  # type: ignore[arg-type]

    # ----- sampling -----------------------------------------------------------------------

    async def create_sampling_session(self, body: requests.CreateSamplingSession) -> str:
        session = self.session(body.session_id)
        if body.base_model is not None:
            self.announce(body.base_model)  # before loading anything: a refused name loads nothing
        adapter = None
        if body.model_path is not None:
            directory = self.store.existing(body.model_path)
            release = self._reserve_adapter(session)
            adapter = self._adapter_name("sample_")
            try:
                with user_errors():
                    await self.on_engine(
                        self._load_or_free,
                        lambda: self.engine.load_sampler_adapter(directory, adapter),
                        adapter,
                    )
            finally:
                release()
        sampler = Sampler(
            new_id("smp-"),
            session.session_id,
            body.base_model or self.options.model_description,
            adapter,
            body.model_path,
        )
        self._adopt_sampler(sampler)
        return sampler.sampler_id

    def sampler_info(self, sampler_id: str) -> dict[str, Any]:
        sampler = self.sampler(sampler_id)
        return {
            "sampler_id": sampler.sampler_id,
            "base_model": self.sampler_base_model(sampler),
            "model_path": sampler.model_path,
        }

    def sample(self, body: requests.Sample) -> dict[str, Any]:
        sampler = self.sampler(body.sampling_session_id)
        session = self.session(sampler.session_id)
        prompt = body.prompt.tokens
        self.check_tokens(prompt, "asample.prompt")
        self._check_request_tokens(len(prompt), "asample.prompt")
        request = protocol.sampling_request(body, prompt, self.engine.eos_token_ids())
        requested = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS
        tokens = min(requested, self.engine.max_length - len(prompt))
        if request.num_samples * tokens > self.limits.max_sample_tokens:
            raise LimitExceeded(
                f"asample asks for {request.num_samples} samples x {tokens} tokens = "
                f"{request.num_samples * tokens} tokens, over --max-sample-tokens "
                f"{self.limits.max_sample_tokens}; ask for fewer samples or a smaller max_tokens"
            )
        request_id = self._submit_sampling(session, sampler.adapter, request)
        return {
            "request_id": request_id,
            "sample_sequence_ids": [f"{request_id}:{i}" for i in range(request.num_samples)],
        }
