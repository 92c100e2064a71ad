"""The HTTP application: middleware, the routers, and the one place errors become responses.

Layers, outside in:

- :class:`~rtc.server.middleware.Guard` checks the API key and bounds (and inflates) the body
  before anything else runs;
- the routers in :mod:`rtc.server.routes` validate their request once, at the edge (pydantic
  models of :mod:`rtc.server.requests`, the protobuf decoder of :mod:`rtc.server.protocol`),
  and call one :class:`~rtc.server.service.TinkerService` method each;
- the service keeps the state, runs the torch work on the engine thread, and raises
  :class:`~rtc.server.errors.ServiceError`; :func:`create_app` maps those to HTTP in one
  handler. Failures inside the engine resolve the request's future with
  ``{"error", "category"}``, which the SDK raises as ``RequestFailedError``.

A malformed request is answered with a 4xx whose ``detail`` says what is wrong, and never
reaches (or breaks) the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .errors import ServiceError
from .middleware import Guard
from .routes import futures, sampling, session, training
from .service import TinkerService

log = logging.getLogger("rtc.serve")


def create_app(service: TinkerService) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        reaper = asyncio.create_task(service.reap_silent_sessions())
        yield
        reaper.cancel()

    app = FastAPI(title="rtc serve", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.service = service
    options = service.options
    app.add_middleware(Guard, api_key=options.api_key, limits=service.limits, latency_ms=options.latency_ms)
    for module in (session, futures, training, sampling):
        app.include_router(module.router)

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, error: ServiceError):
        return JSONResponse({"detail": error.detail}, status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError):
        return JSONResponse({"detail": validation_detail(request, error.errors())}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        # A bug: still JSON with a detail, and logged with its traceback.
        log.error("unhandled error on %s", request.url.path, exc_info=error)
        return JSONResponse({"detail": f"internal error: {type(error).__name__}"}, status_code=500)

    return app


def validation_detail(request: Request, errors: Any) -> str:
    """pydantic's errors as one line: ``endpoint.field.path: message; ...``."""
    endpoint = request.url.path.rstrip("/").rsplit("/", 1)[-1]
    parts = []
    for error in errors:
        loc = [str(p) for p in error.get("loc", ())]
        if loc and loc[0] in ("body", "path", "query", "header"):
            loc = loc[1:]
        where = endpoint + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc)
        kind = error.get("type")
        if kind == "json_invalid":
            reason = (error.get("ctx") or {}).get("error", "")
            parts.append(f"{endpoint}: the request body is not valid JSON ({reason})")
        elif kind == "missing" and not loc:
            parts.append(f"{endpoint}: the request body is missing")
        else:
            message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
            parts.append(f"{where}: {message}")
    return "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more" if len(parts) > 5 else "")
