"""Errors that routes turn into JSON HTTP answers (400 bad parameter, 404 unknown name)."""
from __future__ import annotations


class BadRequest(ValueError):
    """A request parameter is missing or invalid; the route answers 400 `{"error": message}`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(LookupError):
    """An unknown run, worker, span or event; the route answers 404 `{"error": message}`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LoadFailed(RuntimeError):
    """A trace file could not be read; the message says which and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
