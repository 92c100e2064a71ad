"""``retrieve_future``: the long poll for a request's result."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from ..requests import FutureRef
from . import Service

router = APIRouter(prefix="/api/v1")
PROTOBUF = "application/x-protobuf"


@router.post("/retrieve_future")
async def retrieve_future(body: FutureRef, service: Service):
    outcome = await service.retrieve(body.request_id)
    if outcome is None:
        # HTTP 408 is the SDK's quiet "not yet": it polls again without logging a warning,
        # which it does for a 200 {"type": "try_again"} on every poll.
        return JSONResponse(
            {"type": "try_again", "request_id": body.request_id, "queue_state": "active"}, status_code=408
        )
    if outcome.error is not None:
        return {"error": outcome.error, "category": outcome.category}
    if outcome.proto is not None:
        return Response(outcome.proto, media_type=PROTOBUF)
    return Response(outcome.body, media_type="application/json")
