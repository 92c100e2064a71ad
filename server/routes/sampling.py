"""Sampling sessions and samples."""

from __future__ import annotations

from fastapi import APIRouter

from ..requests import CreateSamplingSession, Sample
from . import Service

router = APIRouter(prefix="/api/v1")


@router.post("/create_sampling_session")
async def create_sampling_session(body: CreateSamplingSession, service: Service):
    sampler_id = await service.create_sampling_session(body)
    return {"type": "create_sampling_session", "sampling_session_id": sampler_id}


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, service: Service):
    return service.sampler_info(sampler_id)


@router.post("/asample")
async def asample(body: Sample, service: Service):
    return service.sample(body)
