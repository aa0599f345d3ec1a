"""API errors as the Kubernetes API server reports them: an HTTP code and a `Status` object."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A request the server refuses; rendered as a `v1 Status` with `code`, `reason` and `message`."""

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


def not_found(plural: str, group: str, name: str) -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "group": group, "kind": plural})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        409, "AlreadyExists", f'{resource} "{name}" already exists', {"name": name, "group": group, "kind": plural}
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "group": group, "kind": plural},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, message: str) -> ApiError:
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {message}', {"name": name, "kind": kind})


def expired(message: str) -> ApiError:
    """410 Gone: a resource version (or continue token) older than the retained history."""
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")
