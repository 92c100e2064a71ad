"""HTTP routes of the Tinker API.

Routes parse and validate; :class:`~server.service.TinkerService` keeps the state and runs the
torch work on the engine thread. Validation happens before a request is queued, so a malformed
request is answered with a 4xx and a ``detail`` that says what is wrong, and never reaches (or
breaks) the engine. Failures inside the engine resolve the request's future with
``{"error", "category"}``, which the SDK raises as ``RequestFailedError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from . import protocol
from .engine import EngineUserError, LoraSettings
from .futures import Outcome
from .losses import LossInputError, check_inputs, check_loss
from .protocol import ProtocolError, expect, optional, require
from .service import Sampler, Session, TinkerService, tokenizer_location
from .state import CheckpointNotFoundError, CheckpointPathError, CheckpointRef, check_name

PROTOBUF = "application/x-protobuf"
MAX_RANK = 512


async def json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except Exception:
        raise ProtocolError("the request body is not valid JSON") from None
    return expect(body, dict, "request body")


def create_app(service: TinkerService) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        reaper = asyncio.create_task(service.reap_silent_sessions())
        yield
        reaper.cancel()

    app = FastAPI(title="rtc serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
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
        await service.finish(session)
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
            # HTTP 408 is the SDK's quiet "not yet": it polls again without logging a warning,
            # which it does for a 200 {"type": "try_again"} on every poll.
            return JSONResponse(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}, status_code=408
            )
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
        owner = None
        if body.get("sampling_session_id") is not None:
            sampler = service.sampler(body["sampling_session_id"])
            adapter, owner = sampler.adapter, sampler.session_id
        elif body.get("model_path") is not None:
            raise ProtocolError("asample: create a sampling session for model_path first")
        else:
            require(body, "base_model", str, "asample")
            adapter = None
        prompt = protocol.json_model_input(body.get("prompt"), "asample.prompt")
        service.check_tokens(prompt, "asample.prompt")
        sampling = protocol.sampling_request(body, prompt, service.engine.eos_token_ids())

        request_id = service.spawn_sample(sampling, adapter, owner)
        ids = [f"{request_id}:{i}" for i in range(sampling.num_samples)]
        return {"request_id": request_id, "sample_sequence_ids": ids}

    return app
