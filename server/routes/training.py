"""Training clients: create, inspect, train, save and load."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .. import protocol
from ..requests import CreateModel, LoadWeights, ModelRef, OptimStep, SaveWeights, SaveWeightsForSampler
from . import Service

router = APIRouter(prefix="/api/v1")


@router.post("/create_model")
async def create_model(body: CreateModel, service: Service):
    return service.create_model(body)


@router.post("/get_info")
async def get_info(body: ModelRef, service: Service):
    return service.get_info(body.model_id)


@router.post("/forward_backward")
async def forward_backward(request: Request, service: Service):
    # A protobuf body (the middleware has already bounded and inflated it).
    return service.forward_backward(protocol.decode_forward_backward(await request.body()))


@router.post("/optim_step")
async def optim_step(body: OptimStep, service: Service):
    return service.optim_step(body)


@router.post("/save_weights")
async def save_weights(body: SaveWeights, service: Service):
    return service.save_weights(body)


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(body: SaveWeightsForSampler, service: Service):
    return service.save_weights_for_sampler(body)


@router.post("/load_weights")
async def load_weights(body: LoadWeights, service: Service):
    return service.load_weights(body)
