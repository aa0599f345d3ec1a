"""API errors as the Kubernetes API server reports them: an HTTP code and a `Status` object."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request answered with an error; rendered as a `v1 Status` with `code`, `reason` and `message`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.headers = headers or {}
        """HTTP headers of the answer (`Retry-After` of a 429)."""

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def expired(message: str) -> ApiError:
    """410 Gone: a resource version (or continue token) older than the retained history."""
    return ApiError(410, "Expired", message)
