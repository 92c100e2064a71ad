"""HTTP routes of the Tinker API and the bookkeeping behind them.

The event loop only parses, validates and routes; every piece of torch work goes to the single
engine thread (:class:`concurrent.futures.ThreadPoolExecutor` with one worker), so HTTP stays
responsive while a step runs and the engine never sees two operations at once.

Validation happens before a request is queued, so a malformed request is answered with a 4xx
and a ``detail`` that says what is wrong, and never reaches (or breaks) the engine. Failures
inside the engine resolve the request's future with ``{"error", "category"}``, which the SDK
raises as ``RequestFailedError``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from server import protocol
from server.engine import Engine, EngineUserError, LoraSettings
from server.futures import FutureStore, OrderedLane, Outcome
from server.losses import LossInputError, check_inputs, check_loss
from server.protocol import ProtocolError, expect, optional, require
from server.sampling import SamplingRequest, generate
from server.state import (
    CheckpointNotFoundError,
    CheckpointPathError,
    CheckpointRef,
    CheckpointStore,
    check_name,
)

log = logging.getLogger("rtc.serve")
PROTOBUF = "application/x-protobuf"
MAX_RANK = 512
MAX_SAMPLES = 128
MAX_SAMPLER_ADAPTERS = 16


@dataclass
class ServerOptions:
    model_dir: Path
    model_description: str
    state_dir: Path
    api_key: str | None = None
    latency_ms: float = 0.0


@dataclass
class Session:
    session_id: str
    created: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.time)
    finished: bool = False


@dataclass
class TrainingRun:
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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rtc-engine")
        self._names = itertools.count(1)
        self._announced: set[str] = set()

    # ----- plumbing -----------------------------------------------------------------------

    def close(self) -> None:
        for run in self.runs.values():
            run.lane.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def on_engine(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _outcome_of(self, fn: Callable[[], Outcome]) -> Callable[[], Outcome]:
        """Wrap engine work so that every exception becomes a failed outcome, never a crash."""

        def run() -> Outcome:
            try:
                return fn()
            except (EngineUserError, LossInputError, CheckpointPathError, CheckpointNotFoundError) as error:
                return Outcome(error=str(error), category="user")
            except Exception as error:
                log.exception("engine error")
                return Outcome(error=f"engine error: {type(error).__name__}: {error}", category="server")

        return run

    async def _finish(self, request_id: str, work: Callable[[], Outcome]) -> None:
        outcome = await self.on_engine(self._outcome_of(work))
        if outcome.then is not None and outcome.error is None:
            pending = outcome.then()
            if inspect.isawaitable(pending):
                await pending
        self.futures.resolve(request_id, outcome)

    def spawn(self, work: Callable[[], Outcome]) -> str:
        """Queue work on the engine thread now; returns the request id to poll."""
        request_id = self.futures.create()
        asyncio.get_running_loop().create_task(self._finish(request_id, work))
        return request_id

    def ordered(self, run: TrainingRun, seq_id: int, work: Callable[[], Outcome]) -> str:
        """Queue work behind the training client's earlier requests (by ``seq_id``)."""
        request_id = self.futures.create()
        run.lane.submit(seq_id, lambda: self._finish(request_id, work))
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


async def json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except Exception:
        raise ProtocolError("the request body is not valid JSON") from None
    return expect(body, dict, "request body")


def create_app(service: TinkerService) -> FastAPI:
    app = FastAPI(title="rtc serve", docs_url=None, redoc_url=None, openapi_url=None)
    options = service.options

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if options.api_key is not None and request.headers.get("X-API-Key") != options.api_key:
            return JSONResponse({"detail": "invalid API key"}, status_code=401)
        if options.latency_ms > 0:
            await asyncio.sleep(options.latency_ms / 1000)
        return await call_next(request)

    @app.exception_handler(ProtocolError)
    async def bad_request(_: Request, error: ProtocolError):
        return JSONResponse({"detail": str(error)}, status_code=400)

    @app.exception_handler(LossInputError)
    async def bad_loss(_: Request, error: LossInputError):
        return JSONResponse({"detail": str(error)}, status_code=400)

    @app.exception_handler(CheckpointPathError)
    async def bad_path(_: Request, error: CheckpointPathError):
        return JSONResponse({"detail": str(error)}, status_code=400)

    @app.exception_handler(CheckpointNotFoundError)
    async def missing_checkpoint(_: Request, error: CheckpointNotFoundError):
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.exception_handler(EngineUserError)
    async def engine_refused(_: Request, error: EngineUserError):
        return JSONResponse({"detail": str(error)}, status_code=400)

    # ----- session ------------------------------------------------------------------------

    @app.post("/api/v1/client/config")
    async def client_config():
        return {
            "use_pyqwest_transport": False,
            "sample_use_retrieve_futures": False,
            "proto_compress_fwdbwd": False,
            "parallel_fwdbwd_chunks": True,
            "sample_join_sampling_session": False,
            "custom_loss_server_side": False,
        }

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config():
        return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}

    @app.post("/api/v1/create_session")
    async def create_session():
        session = Session(f"rtc-{uuid.uuid4().hex[:12]}")
        service.sessions[session.session_id] = session
        return {"type": "create_session", "session_id": session.session_id}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request):
        session = service.session((await json_body(request)).get("session_id"))
        session.last_heartbeat = time.time()
        return {"type": "session_heartbeat"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str):
        session = service.sessions.get(session_id)
        if session is None:
            raise HTTPException(404, f"unknown session_id {session_id!r}")
        if not session.finished:
            session.finished = True
            adapters = [r.adapter for r in service.runs.values() if r.session_id == session_id]
            adapters += [
                s.adapter for s in service.samplers.values() if s.session_id == session_id and s.adapter
            ]
            for run in [r for r in service.runs.values() if r.session_id == session_id]:
                run.lane.close()
                del service.runs[run.model_id]
            for sampler_id in [k for k, s in service.samplers.items() if s.session_id == session_id]:
                del service.samplers[sampler_id]
            for adapter in adapters:
                await service.on_engine(service.engine.delete_adapter, adapter)
        return {}

    @app.post("/api/v1/telemetry")
    async def telemetry():
        return {"status": "accepted"}

    @app.get("/api/v1/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities():
        return {
            "supported_models": [
                {
                    "model_name": options.model_description,
                    "max_context_length": service.engine.max_length,
                    "trainable": True,
                    "sampleable": True,
                }
            ]
        }

    # ----- futures ------------------------------------------------------------------------

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request):
        request_id = require(await json_body(request), "request_id", str, "retrieve_future")
        if not service.futures.known(request_id):
            raise HTTPException(404, f"unknown request_id {request_id!r}")
        outcome = await service.futures.wait(request_id)
        if outcome is None:
            return {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        if outcome.error is not None:
            return {"error": outcome.error, "category": outcome.category}
        if outcome.proto is not None:
            return Response(outcome.proto, media_type=PROTOBUF)
        return outcome.json

    # ----- training -----------------------------------------------------------------------

    @app.post("/api/v1/create_model")
    async def create_model(request: Request):
        body = await json_body(request)
        session = service.session(body.get("session_id"))
        model_seq_id = require(body, "model_seq_id", int, "create_model")
        base_model = require(body, "base_model", str, "create_model")
        lora = require(body, "lora_config", dict, "create_model")
        rank = require(lora, "rank", int, "create_model.lora_config")
        if not 1 <= rank <= MAX_RANK:
            raise ProtocolError(f"create_model.lora_config.rank must be between 1 and {MAX_RANK}, got {rank}")
        optimizer = optional(body, "optimizer_config", dict, "create_model", {})
        if optimizer.get("type", "adamw") != "adamw":
            raise ProtocolError(
                f"optimizer {optimizer.get('type')!r} is not supported; this server runs AdamW"
            )
        settings = LoraSettings(
            rank=rank,
            seed=optional(lora, "seed", int, "create_model.lora_config"),
            train_mlp=optional(lora, "train_mlp", bool, "create_model.lora_config", True),
            train_attn=optional(lora, "train_attn", bool, "create_model.lora_config", True),
            train_unembed=optional(lora, "train_unembed", bool, "create_model.lora_config", True),
        )
        if not (settings.train_mlp or settings.train_attn or settings.train_unembed):
            raise ProtocolError(
                "create_model.lora_config: train_mlp, train_attn and train_unembed are all false"
            )
        service.announce(base_model)
        run = service.new_run(session.session_id, model_seq_id, base_model, rank)

        def work() -> Outcome:
            service.engine.create_training_adapter(run.adapter, settings)
            return Outcome(
                json={"type": "create_model", "model_id": run.model_id}, then=lambda: service.register(run)
            )

        return {"request_id": service.spawn(work), "model_id": run.model_id}

    @app.post("/api/v1/get_info")
    async def get_info(request: Request):
        return service.training_info(service.run((await json_body(request)).get("model_id")))

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request):
        body = await request.body()
        if request.headers.get("content-encoding") == "zstd":
            import zstandard

            try:
                body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
            except zstandard.ZstdError as error:
                raise ProtocolError(f"forward_backward body is not valid zstd: {error}") from None
        call = protocol.decode_forward_backward(body)
        run = service.run(call.model_id)
        spec = check_loss(call.loss_fn, call.loss_fn_config)
        if not call.data:
            raise ProtocolError("forward_backward: data is empty")
        for index, datum in enumerate(call.data):
            service.check_tokens(datum.tokens, f"datum {index}")
            check_inputs(spec, datum.inputs, len(datum.tokens), index)
            targets = datum.inputs["target_tokens"]
            if targets.numel() and not (
                0 <= int(targets.min()) and int(targets.max()) < service.engine.vocab_size
            ):
                raise ProtocolError(f"datum {index}: target_tokens outside the vocabulary")

        def work() -> Outcome:
            result = service.engine.forward_backward(run.adapter, call.data, spec, call.forward_only)
            return Outcome(proto=protocol.encode_forward_backward(result, {"loss:sum": result.loss_sum}))

        return {"request_id": service.ordered(run, call.seq_id, work), "model_id": run.model_id}

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request):
        body = await json_body(request)
        run = service.run(body.get("model_id"))
        seq_id = require(body, "seq_id", int, "optim_step")
        params = protocol.adam_params(body)

        def work() -> Outcome:
            return Outcome(json={"metrics": service.engine.optim_step(run.adapter, params)})

        return {"request_id": service.ordered(run, seq_id, work), "model_id": run.model_id}

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request):
        body = await json_body(request)
        run = service.run(body.get("model_id"))
        seq_id = require(body, "seq_id", int, "save_weights")
        ref = CheckpointRef(run.run_id, "weights", check_name(require(body, "path", str, "save_weights")))
        service.store.directory(ref)

        def work() -> Outcome:
            def fill(directory: Path) -> None:
                service.engine.save_adapter(run.adapter, directory, True, run.base_model)

            path = service.store.write(ref, fill)
            return Outcome(json={"type": "save_weights", "path": path})

        return {"request_id": service.ordered(run, seq_id, work), "model_id": run.model_id}

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request):
        body = await json_body(request)
        run = service.run(body.get("model_id"))
        seq_id = require(body, "seq_id", int, "save_weights_for_sampler")
        name = optional(body, "path", str, "save_weights_for_sampler")
        if name is not None:
            ref = CheckpointRef(run.run_id, "sampler_weights", check_name(name))
            service.store.directory(ref)

            def save() -> Outcome:
                def fill(directory: Path) -> None:
                    service.engine.save_adapter(run.adapter, directory, False, run.base_model)

                return Outcome(
                    json={"type": "save_weights_for_sampler", "path": service.store.write(ref, fill)}
                )

            return {"request_id": service.ordered(run, seq_id, save), "model_id": run.model_id}

        sampling_seq_id = optional(body, "sampling_session_seq_id", int, "save_weights_for_sampler")
        suffix = sampling_seq_id if sampling_seq_id is not None else service.new_name("ephemeral")
        sampler = Sampler(f"{run.session_id}:sample:{suffix}", run.session_id, run.base_model, None)

        def snapshot() -> Outcome:
            sampler.adapter = service.new_name("sample_")
            service.engine.snapshot_for_sampling(run.adapter, sampler.adapter)
            return Outcome(
                json={"type": "save_weights_for_sampler", "sampling_session_id": sampler.sampler_id},
                then=lambda: service.add_sampler(sampler),
            )

        return {"request_id": service.ordered(run, seq_id, snapshot), "model_id": run.model_id}

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request):
        body = await json_body(request)
        path = require(body, "path", str, "load_weights")
        with_optimizer = optional(body, "optimizer", bool, "load_weights", False)
        directory = service.store.existing(path)
        if body.get("model_id") is not None:
            # The deprecated TrainingClient.load_state: replace an existing client's weights.
            run = service.run(body["model_id"])
            seq_id = require(body, "seq_id", int, "load_weights")

            def reload() -> Outcome:
                old = run.adapter
                new = service.new_name("train_")
                service.engine.load_training_adapter(directory, new, with_optimizer)
                run.adapter = new
                service.engine.delete_adapter(old)
                return Outcome(json={"type": "load_weights", "path": path, "model_id": run.model_id})

            return {"request_id": service.ordered(run, seq_id, reload), "model_id": run.model_id}

        session = service.session(body.get("session_id"))
        model_seq_id = require(body, "model_seq_id", int, "load_weights")
        base_model = optional(body, "base_model", str, "load_weights")
        if base_model is not None:
            service.announce(base_model)
        else:
            base_model = str(
                service.engine.checkpoint_info(directory).get("base_model") or options.model_description
            )
        run = service.new_run(session.session_id, model_seq_id, base_model, 0)

        def create() -> Outcome:
            service.engine.load_training_adapter(directory, run.adapter, with_optimizer)
            run.rank = service.engine.adapter_rank(run.adapter)
            return Outcome(
                json={"type": "load_weights", "path": path, "model_id": run.model_id},
                then=lambda: service.register(run),
            )

        return {"request_id": service.spawn(create), "model_id": run.model_id}

    # ----- sampling -----------------------------------------------------------------------

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request):
        body = await json_body(request)
        session = service.session(body.get("session_id"))
        seq_id = require(body, "sampling_session_seq_id", int, "create_sampling_session")
        model_path = optional(body, "model_path", str, "create_sampling_session")
        base_model = optional(body, "base_model", str, "create_sampling_session")
        if model_path is None and base_model is None:
            raise ProtocolError("create_sampling_session needs base_model or model_path")
        sampler_id = f"{session.session_id}:sample:{seq_id}"
        if sampler_id in service.samplers:
            raise HTTPException(409, f"sampling session {sampler_id} already exists")
        adapter = None
        if model_path is not None:
            directory = service.store.existing(model_path)
            adapter = service.new_name("sample_")
            await service.on_engine(service.engine.load_sampler_adapter, directory, adapter)
        if base_model is not None:
            service.announce(base_model)
        name = base_model or options.model_description
        await service.add_sampler(Sampler(sampler_id, session.session_id, name, adapter, model_path))
        return {"type": "create_sampling_session", "sampling_session_id": sampler_id}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str):
        sampler = service.sampler(sampler_id)
        # The SDK loads SamplingClient.get_tokenizer() from this name: give it the local directory.
        return {
            "sampler_id": sampler.sampler_id,
            "base_model": tokenizer_location(options.model_dir),
            "model_path": sampler.model_path,
        }

    @app.post("/api/v1/asample")
    async def asample(request: Request):
        body = await json_body(request)
        if body.get("sampling_session_id") is not None:
            sampler = service.sampler(body["sampling_session_id"])
            adapter = sampler.adapter
        elif body.get("model_path") is not None:
            raise ProtocolError("asample: create a sampling session for model_path first")
        else:
            require(body, "base_model", str, "asample")
            adapter = None
        prompt = protocol.json_model_input(body.get("prompt"), "asample.prompt")
        service.check_tokens(prompt, "asample.prompt")
        sampling = sampling_request(body, prompt, service.engine)

        def work() -> Outcome:
            with service.engine.use(adapter) as model:
                result = generate(model, service.engine.tokenizer, sampling, service.engine.max_length)
            return Outcome(proto=protocol.encode_sample(result))

        request_id = service.spawn(work)
        ids = [f"{request_id}:{i}" for i in range(sampling.num_samples)]
        return {"request_id": request_id, "sample_sequence_ids": ids}

    return app


def sampling_request(body: dict[str, Any], prompt: list[int], engine: Engine) -> SamplingRequest:
    where = "asample.sampling_params"
    params = optional(body, "sampling_params", dict, "asample", {})
    num_samples = optional(body, "num_samples", int, "asample", 1)
    if not 1 <= num_samples <= MAX_SAMPLES:
        raise ProtocolError(f"asample.num_samples must be between 1 and {MAX_SAMPLES}")
    max_tokens = optional(params, "max_tokens", int, where)
    if max_tokens is not None and max_tokens < 0:
        raise ProtocolError(f"{where}.max_tokens must be >= 0")
    temperature = optional(params, "temperature", float, where, 1.0)
    top_p = optional(params, "top_p", float, where, 1.0)
    if temperature < 0 or not 0 < top_p <= 1:
        raise ProtocolError(f"{where}: temperature must be >= 0 and top_p in (0, 1]")
    stop = params.get("stop")
    stop_strings: list[str] = []
    stop_ids: list[int] = list(engine_stop_ids(engine))
    if isinstance(stop, str):
        stop_strings = [stop]
    elif isinstance(stop, list):
        if all(isinstance(s, str) for s in stop):
            stop_strings = stop
        elif all(isinstance(s, int) and not isinstance(s, bool) for s in stop):
            stop_ids = stop
        else:
            raise ProtocolError(f"{where}.stop must be a string, a list of strings or a list of token ids")
        if not stop:
            stop_ids = []
    elif stop is not None:
        raise ProtocolError(f"{where}.stop must be a string, a list of strings or a list of token ids")
    topk_prompt = optional(body, "topk_prompt_logprobs", int, "asample", 0)
    if topk_prompt < 0:
        raise ProtocolError("asample.topk_prompt_logprobs must be >= 0")
    for name in ("topk_sample_logprobs", "prompt_alt_tokens_k"):
        if optional(body, name, int, "asample", 0):
            raise ProtocolError(f"asample.{name} is not supported by this server")
    if body.get("target_prompt_logprobs") is not None or body.get("prompt_logprobs_last_n") is not None:
        raise ProtocolError("asample: target_prompt_logprobs and prompt_logprobs_last_n are not supported")
    return SamplingRequest(
        prompt=prompt,
        num_samples=num_samples,
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=optional(params, "top_k", int, where, -1),
        top_p=top_p,
        seed=optional(params, "seed", int, where),
        stop_strings=stop_strings,
        stop_token_ids=stop_ids,
        prompt_logprobs=bool(optional(body, "prompt_logprobs", bool, "asample", False)),
        topk_prompt_logprobs=topk_prompt,
    )


def engine_stop_ids(engine: Engine) -> set[int]:
    """End-of-sequence ids: the generation config's and the tokenizer's."""
    ids: set[int] = set()
    eos = getattr(getattr(engine.base, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list):
        ids.update(int(i) for i in eos)
    if engine.tokenizer.eos_token_id is not None:
        ids.add(int(engine.tokenizer.eos_token_id))
    return ids
