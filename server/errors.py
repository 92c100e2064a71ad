"""The server's error family: what went wrong, as an HTTP status, a category and a detail.

The service and state layers raise these and know nothing of HTTP frameworks; the HTTP layer
maps every one of them to ``{"detail": ...}`` with its status in a single handler
(:func:`rtc.server.app.create_app`). Work that fails on the engine thread becomes a failed
future instead, ``{"error": detail, "category": category}``, which the SDK raises as
``RequestFailedError``.

Statuses are chosen for how the SDK reacts: it retries 408, 409, 429 and 5xx for minutes, so an
error that will not go away by itself (a bad value, a limit, a missing object) is a 4xx it does
not retry.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error a client can cause or see; ``str(error)`` is the detail."""

    status = 500
    category = "server"

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class BadRequest(ServiceError, ValueError):
    """The request is malformed or a value is out of range (400)."""

    status = 400
    category = "user"


class LimitExceeded(BadRequest):
    """The request asks for more work than this server's limits allow (400; names the flag)."""


class Unauthorized(ServiceError):
    """Missing or wrong API key (401)."""

    status = 401
    category = "user"


class QuotaExceeded(ServiceError):
    """A session or the server holds as many adapters as it may (403; names the flag)."""

    status = 403
    category = "user"


class NotFound(ServiceError, LookupError):
    """No such session, model, sampler, future or checkpoint (404)."""

    status = 404
    category = "user"


class Conflict(ServiceError):
    """The object already exists (409)."""

    status = 409
    category = "user"


class Gone(ServiceError):
    """The object existed but was finished or evicted (410; the SDK stops heartbeating on it)."""

    status = 410
    category = "user"


class PayloadTooLarge(ServiceError):
    """The body, or what it inflates to, is over the server's size limit (413)."""

    status = 413
    category = "user"


class UnsupportedMediaType(ServiceError):
    """A ``Content-Encoding`` the server does not decode (415)."""

    status = 415
    category = "user"
