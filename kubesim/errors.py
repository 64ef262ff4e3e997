"""API errors rendered as metav1.Status objects, like kube-apiserver does."""
from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class ApiError(Exception):
    """An error the API server returns to its client as a Status object."""

    def __init__(self, code: int, message: str, reason: str | None = None,
                 details: dict[str, Any] | None = None,
                 causes: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = dict(details or {})
        if causes:
            self.details["causes"] = causes

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = self.details
        return status

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"ApiError({self.code}, {self.reason}, {self.message!r})"


def _details(resource: str, name: str | None) -> dict[str, Any]:
    plural, _, grp = resource.partition(".")
    d: dict[str, Any] = {"kind": plural}
    if grp:
        d["group"] = grp
    if name:
        d["name"] = name
    return d


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, f'{resource} "{name}" not found', "NotFound", _details(resource, name))


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(409, f'{resource} "{name}" already exists', "AlreadyExists",
                    _details(resource, name))


def conflict(resource: str, name: str, why: str) -> ApiError:
    return ApiError(409, f'Operation cannot be fulfilled on {resource} "{name}": {why}',
                    "Conflict", _details(resource, name))


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid. causes: [{"field": "spec.x", "reason": "FieldValueInvalid", "message": ...}]"""
    text = "; ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"]
                     for c in causes)
    d: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        d["group"] = group
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, f'{qualified} "{name}" is invalid: {text}', "Invalid", d, causes)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")
