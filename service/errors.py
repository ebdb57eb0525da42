"""One error hierarchy, one status table, one error body: ``{"error": {"type", "message"}}``.

Every failure a client can see is a :class:`ServiceError` subclass whose ``type`` is a key of
:data:`STATUS`. Handlers for the specific cases are registered before the catch-all, so the
status a client gets is the status the metrics record, and nothing internal (tracebacks,
exception reprs) ever reaches a response body.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from models.errors import AttentionError, ModelInputError

log = logging.getLogger("attnserve")

# The one table: error type -> HTTP status.
STATUS: dict[str, int] = {
    "invalid_request": 422,
    "memory_budget_exceeded": 422,
    "compute_budget_exceeded": 422,
    "unauthorized": 401,
    "not_found": 404,
    "model_not_found": 404,
    "method_not_allowed": 405,
    "body_too_large": 413,
    "body_timeout": 408,
    "queue_full": 429,
    "client_closed_request": 499,
    "internal_error": 500,
    "not_ready": 503,
    "shutting_down": 503,
    "timeout": 504,
    "out_of_memory": 507,
}


class ServiceError(Exception):
    """Base of every error a client sees; ``type`` picks the status from :data:`STATUS`."""

    type: ClassVar[str] = "internal_error"

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return STATUS[self.type]


class InvalidRequest(ServiceError):
    """Malformed or out-of-range input (including attention backend/options)."""

    type = "invalid_request"


class MemoryBudgetExceeded(ServiceError):
    """One row of the request (a text or a series) needs more memory under its attention
    backend than the batch memory budget allows; the message names the backend, the length,
    the estimate, the budget and the backends that would fit."""

    type = "memory_budget_exceeded"


class ComputeBudgetExceeded(ServiceError):
    """The request's estimated compute on this device (rows x length, backend and options) is
    over the per-request limit; the message says how many rows, which options or which backends
    would fit."""

    type = "compute_budget_exceeded"


class Unauthorized(ServiceError):
    """Missing or wrong API key."""

    type = "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"WWW-Authenticate": "Bearer"})


class ModelNotFound(ServiceError):
    """The request names a model this server has not loaded (or not for this task)."""

    type = "model_not_found"


class BodyTooLarge(ServiceError):
    """The request body is over ``max_body_bytes``."""

    type = "body_too_large"


class QueueFull(ServiceError):
    """The model's queue is full; the client should retry after ``retry_after_s``."""

    type = "queue_full"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message, {"Retry-After": str(max(1, retry_after_s))})


class ClientDisconnected(ServiceError):
    """The client went away before its answer was ready (only metrics ever see this)."""

    type = "client_closed_request"


class NotReady(ServiceError):
    """Models are still loading or warming up."""

    type = "not_ready"


class ShuttingDown(ServiceError):
    """The server is draining after SIGTERM and takes no new model requests."""

    type = "shutting_down"


class RequestTimeout(ServiceError):
    """The request waited past ``request_timeout_s``."""

    type = "timeout"


class OutOfDeviceMemory(ServiceError):
    """The request does not fit in device memory even alone."""

    type = "out_of_memory"


class InternalError(ServiceError):
    """Anything unexpected; the message never carries internals."""

    type = "internal_error"


def from_model_error(exc: Exception) -> ServiceError:
    """Map an error raised by ``models/`` to the service error a client sees."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, AttentionError | ModelInputError):
        return InvalidRequest(str(exc))
    return InternalError("internal error; the server logged the details")


def error_body(type_: str, message: str) -> dict[str, Any]:
    """The one error body."""
    return {"error": {"type": type_, "message": message}}


def error_response(exc: ServiceError) -> JSONResponse:
    """The JSON response for ``exc``, with its status and headers."""
    return JSONResponse(error_body(exc.type, exc.message), exc.status, headers=exc.headers)


def _describe_validation(exc: RequestValidationError) -> str:
    """One readable line per pydantic error, e.g. ``body.series.0.values: Field required``."""
    parts = []
    for err in exc.errors()[:10]:
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            return f"malformed JSON: {ctx.get('error', 'cannot parse the body')}"
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid"))
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    content_type = request.headers.get("content-type", "")
    whole_body = any(tuple(e.get("loc", ())) == ("body",) for e in exc.errors())
    if whole_body and "json" not in content_type.lower():
        # FastAPI reads a body as JSON only under a JSON content type: otherwise the body is
        # bytes and pydantic's "not a valid dictionary" would hide the real mistake.
        sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
        return error_response(
            InvalidRequest(
                f"the body was sent with {sent}, so it was not read as JSON; send the JSON "
                "body with the header Content-Type: application/json"
            )
        )
    return error_response(InvalidRequest(_describe_validation(exc)))


async def _model_error(_: Request, exc: Exception) -> JSONResponse:
    return error_response(from_model_error(exc))


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    type_ = {
        404: "not_found",
        405: "method_not_allowed",
        408: "body_timeout",
        413: "body_too_large",
    }.get(exc.status_code, "invalid_request")
    response = JSONResponse(error_body(type_, str(exc.detail)), exc.status_code)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error in %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(InternalError("internal error; the server logged the details"))


def install_error_handlers(app: FastAPI) -> None:
    """Specific handlers first, the catch-all last. Starlette runs the catch-all outside the app's
    middleware, so :class:`~service.http.middleware.RequestContext` answers unexpected errors itself
    (same body, plus the request id and the 500 in the metrics); this one is the safety net."""
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(AttentionError, _model_error)
    app.add_exception_handler(ModelInputError, _model_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
