"""Errors that routes turn into JSON HTTP answers: each class carries its HTTP status."""

from __future__ import annotations


class RequestError(Exception):
    """An answer other than 200: the route replies `status` with `{"error": message}` (and `headers`)."""

    status = 500

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})


class BadRequest(RequestError, ValueError):
    """A request parameter is missing or invalid (400)."""

    status = 400


class NotFound(RequestError, LookupError):
    """An unknown run, worker, span or event (404)."""

    status = 404


class LoadFailed(RequestError, RuntimeError):
    """A trace file could not be read; the message says which and why (422)."""

    status = 422


class NotReady(RequestError):
    """What was asked for is still being computed in the background: ask again after Retry-After (503)."""

    status = 503
