"""The HTTP routes, one router per resource; each parses its request and calls the service.

Bodies arrive validated (:mod:`rtc.server.requests`, or the protobuf decoder for
``forward_backward``); errors are :class:`~rtc.server.errors.ServiceError` raised by the service
and answered by the one handler in :mod:`rtc.server.app`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..service import TinkerService


def service_of(request: Request) -> TinkerService:
    return request.app.state.service


Service = Annotated[TinkerService, Depends(service_of)]
