"""Sessions and the service itself: config, sessions, heartbeats, capabilities, health."""

from __future__ import annotations

from fastapi import APIRouter

from ..requests import SessionRef
from . import Service

router = APIRouter(prefix="/api/v1")


@router.post("/client/config")
async def client_config(service: Service):
    return service.client_config()


@router.post("/client/dynamic_config")
async def dynamic_config():
    return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}


@router.post("/create_session")
async def create_session(service: Service):
    return {"type": "create_session", "session_id": service.create_session()}


@router.post("/session_heartbeat")
async def heartbeat(body: SessionRef, service: Service):
    service.heartbeat(body.session_id)
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
async def finish_session(session_id: str, service: Service):
    await service.finish_session(session_id)
    return {}


@router.post("/telemetry")
async def telemetry():
    return {"status": "accepted"}


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/get_server_capabilities")
async def capabilities(service: Service):
    return service.capabilities()
