"""Every failure becomes a JSON `{"error": {"code", "message"}}` with the right status."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tenure.errors import TenureError, error_body, served_as
from tenure.logs import emit
from tenure.service.models import ErrorOut

log = logging.getLogger("tenure.service")


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The one shape of every error answer."""
    extra = {} if details is None else {"details": details}
    return JSONResponse(error_body(code, message, **extra), status_code=status, headers=headers)


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the error statuses a route can answer."""
    return {status: {"model": ErrorOut} for status in statuses}


class ApiError(Exception):
    """An answer decided in a handler (401, 403, 404, 415, …)."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def install(app: FastAPI) -> None:
    """Register the handlers that turn exceptions into JSON errors."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, headers=exc.headers)

    @app.exception_handler(TenureError)
    async def tenure_error(request: Request, exc: TenureError) -> JSONResponse:
        served = served_as(exc)
        if served is None:
            emit(log, logging.ERROR, "request_failed", path=request.url.path, code="tenure_error")
            return error_response(500, "internal_error", "the request failed; see the service log")
        status, code = served.http_status, served.error_code
        headers = {"Retry-After": "1"} if status == 503 else None
        if status == 503:
            emit(log, logging.WARNING, "request_failed", path=request.url.path, code=code)
        return error_response(status, code, str(exc), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details: list[dict[str, Any]] = [
            {"loc": [str(part) for part in err.get("loc", ())], "msg": str(err.get("msg", ""))}
            for err in exc.errors()
        ]
        errors = exc.errors()
        if errors and errors[0].get("type") == "json_invalid":
            # Its location is a character offset in the body, which reads like a field name.
            at = errors[0].get("loc", ("body", "?"))[-1]
            message = f"the request body is not valid JSON (error at character {at})"
            return error_response(422, "invalid_request", message, details=details)
        where = ".".join(details[0]["loc"]) if details else ""
        what = str(details[0]["msg"]) if details else "invalid request"
        message = f"{where}: {what}" if where else what
        return error_response(422, "invalid_request", message, details=details)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error"
        )
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)
