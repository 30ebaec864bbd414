"""Errors: every answer a node refuses with is an exception carrying its status, its reason
(when the node names one) and its message, as the node wrote them."""

from __future__ import annotations

import json
from typing import Any, Optional

__all__ = [
    "ChorusError",
    "ConnectError",
    "PinMismatch",
    "ProtocolError",
    "Refused",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "Conflict",
    "LimitReached",
    "NotFound",
    "SandboxGone",
    "Unavailable",
    "CommandFailed",
    "error_from_answer",
]


class ChorusError(Exception):
    """A call that did not do what was asked.

    ``status`` is the HTTP status (``None`` when no answer came), ``reason`` the node's short
    reason when it gave one (``closed``, ``per_owner``, ``worker_full``, a sandbox error's
    category...), ``message`` the node's own words, ``body`` the answer's JSON (or text),
    ``where`` the address that answered."""

    def __init__(
        self,
        status: Optional[int],
        reason: Optional[str],
        message: str,
        body: Any = None,
        where: str = "",
    ) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.where = where

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        text = f"{self.where or 'the node'} answered {self.status}"
        if self.reason and self.reason not in self.message:
            text += f" ({self.reason})"
        return f"{text}: {self.message}"


class ConnectError(ChorusError):
    """The node could not be reached, or the connection broke before a whole answer came."""

    def __init__(self, message: str) -> None:
        super().__init__(None, "unreachable", message)


class PinMismatch(ConnectError):
    """The node's TLS certificate is not the pinned one: the connection was closed right after
    the handshake, before any byte of the request (nor the token) was sent."""

    def __init__(self, message: str, got: str, pinned: str) -> None:
        super().__init__(message)
        self.reason = "pin_mismatch"
        self.got = got
        self.pinned = pinned


class ProtocolError(ChorusError):
    """An answer this client does not understand (not HTTP, or not the JSON it should be)."""

    def __str__(self) -> str:
        return self.message


class Refused(ChorusError):
    """The node refused the request (4xx other than 404 and 410)."""


class BadRequest(Refused):
    """400: the request is wrong, or a rule refuses it (the message says which)."""


class Unauthorized(Refused):
    """401: no token, or one the node does not accept."""


class Forbidden(Refused):
    """403: the token's role may not do this."""


class Conflict(Refused):
    """409: the resource is not in a state that allows it (a finished task's cancel)."""


class LimitReached(Refused):
    """429: a bound was reached (``per_owner``: this token's sandboxes; ``worker_full``)."""


class NotFound(ChorusError):
    """404: no such resource — or another token's sandbox, which is answered the same way."""


class SandboxGone(ChorusError):
    """410: the sandbox ended. ``reason`` is ``closed``, ``idle``, ``expired`` or ``lost``;
    ``detail`` and ``ago_ms`` say more when the node knows."""

    def __init__(
        self,
        status: Optional[int],
        reason: Optional[str],
        message: str,
        body: Any = None,
        where: str = "",
        detail: Optional[str] = None,
        ago_ms: Optional[int] = None,
    ) -> None:
        super().__init__(status, reason, message, body, where)
        self.detail = detail
        self.ago_ms = ago_ms


class Unavailable(ChorusError):
    """502, 503 or 504: the node, or the node holding the sandbox, cannot answer now (down,
    cut off, no sandboxes here, starting); trying again later may work."""


class CommandFailed(ChorusError):
    """A helper command the client ran in a sandbox (``files.list``) failed."""


def error_from_answer(status: int, body: bytes, where: str = "") -> ChorusError:
    """The exception for a non-2xx answer: its status, reason and message as the node said."""
    value: Any
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        value = body.decode("utf-8", "replace").strip()
    message = ""
    reason: Optional[str] = None
    gone: dict[str, Any] = {}
    if isinstance(value, dict):
        message = str(value.get("error") or value.get("message") or "")
        if isinstance(value.get("gone"), dict):
            gone = value["gone"]
            reason = gone.get("reason")
        elif isinstance(value.get("reason"), str):
            reason = value["reason"]
        elif isinstance(value.get("category"), str):
            reason = value["category"]
    elif isinstance(value, str):
        message = value
    if not message:
        message = "(no reason given)"
    if status == 410:
        ago = gone.get("ago_ms")
        return SandboxGone(
            status,
            reason,
            message,
            value,
            where,
            detail=gone.get("detail"),
            ago_ms=int(ago) if isinstance(ago, (int, float)) else None,
        )
    cls: type[ChorusError]
    if status == 404:
        cls = NotFound
    elif status == 400:
        cls = BadRequest
    elif status == 401:
        cls = Unauthorized
    elif status == 403:
        cls = Forbidden
    elif status == 409:
        cls = Conflict
    elif status == 429:
        cls = LimitReached
    elif status in (502, 503, 504):
        cls = Unavailable
    elif 400 <= status < 500:
        cls = Refused
    else:
        cls = ChorusError
    return cls(status, reason, message, value, where)
