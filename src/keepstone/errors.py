"""Every error Keepstone raises on purpose, in one tree.

Each class carries the HTTP ``status`` and the snake_case ``code`` of the contract
(SPEC §5-§7.4): a class states its ``status`` where it differs from its parent's, and its
``code`` is its name in snake_case (``TeamNotFound``: ``team_not_found``), so a class
below is declared by its name and place alone. The API renders them as
``{"error": {"code", "message"}}``, the CLI as one line on stderr with exit status 1 (2 for
usage), the agent tools as a tool result. The message is one sentence a person (or a
model) can act on.

    KeepstoneError                        500 internal_error
    ├── BadRequest                    400
    │   ├── InvalidSpaceRef           400 invalid_space_ref
    │   ├── UnknownParameter          400 unknown_parameter
    │   ├── UnsupportedVisibility     400 unsupported_visibility
    │   └── InvalidRequest            400 invalid_request
    ├── Unauthenticated               401 unauthenticated
    ├── PlanRequired                  402 plan_required
    ├── Forbidden                     403 forbidden
    │   ├── MemberRoleRequired        403 member_role_required
    │   ├── PlatformAuthorityRequired 403 platform_authority_required
    │   └── CsrfRequired              403 csrf_required
    ├── NotFound                      404 not_found
    │   ├── TeamNotFound              404 team_not_found
    │   ├── RepoNotFound              404 repo_not_found
    │   └── RecordNotFound            404 record_not_found
    ├── Conflict                      409 conflict
    │   ├── MemoryOff                 409 memory_off
    │   └── AlreadyExists             409 already_exists
    ├── PreconditionFailed            412 precondition_failed
    ├── TooLarge                      413
    │   ├── QuotaExceeded             413 quota_exceeded
    │   ├── DocumentTooLarge          413 document_too_large
    │   ├── ImportTooLarge            413 import_too_large
    │   └── BodyTooLarge              413 body_too_large
    ├── Unprocessable                 422
    │   ├── InvalidPath               422 invalid_path
    │   ├── SecretDetected            422 secret_detected
    │   ├── InvalidDocument           422 invalid_document
    │   ├── InvalidArchive            422 invalid_archive
    │   └── InvalidEdit               422 invalid_edit
    ├── RateLimited                   429 rate_limited
    └── StoreUnavailable              503 store_unavailable
        ├── DatabaseMissing           503 store_unavailable (the operator hears more)
        └── InsufficientStorage       507 insufficient_storage
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, ClassVar


class KeepstoneError(Exception):
    """Root of every deliberate Keepstone error."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    #: A fuller message for the operator of the process, who may be told what a caller of
    #: the API may not (the CLI prints it, the server logs it); None: the message says all.
    operator_message: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The tree's own classes only: a subclass elsewhere (the CLI's usage error) is a kind
        # of its parent and answers with the parent's code.
        if cls.__module__ == __name__ and "code" not in cls.__dict__:
            cls.code = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """The wire form: ``{"error": {"code", "message", **details}}``."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        body.update(self.details)
        return {"error": body}


class BadRequest(KeepstoneError):
    status = 400


class InvalidSpaceRef(BadRequest): ...


class UnknownParameter(BadRequest): ...


class UnsupportedVisibility(BadRequest): ...


class InvalidRequest(BadRequest): ...


class Unauthenticated(KeepstoneError):
    status = 401


class PlanRequired(KeepstoneError):
    status = 402


class Forbidden(KeepstoneError):
    status = 403


class MemberRoleRequired(Forbidden): ...


class PlatformAuthorityRequired(Forbidden): ...


class CsrfRequired(Forbidden): ...


class NotFound(KeepstoneError):
    status = 404


def no_document(path: str, space_id: str) -> NotFound:
    """The refusal of a document that is not there, in one wording whichever store says it,
    so a local ``Memory`` and a server's answer read the same."""
    return NotFound(f"no document at {path!r} in space {space_id}", path=path)


class TeamNotFound(NotFound): ...


class RepoNotFound(NotFound): ...


class RecordNotFound(NotFound): ...


class Conflict(KeepstoneError):
    status = 409


class MemoryOff(Conflict): ...


class AlreadyExists(Conflict):
    """A move onto a path that holds a document, without ``overwrite``."""


class PreconditionFailed(KeepstoneError):
    status = 412


class TooLarge(KeepstoneError):
    status = 413


class QuotaExceeded(TooLarge):
    """A write would take a counter past its quota.

    ``details`` carries ``limit`` (which counter: ``document``, ``space``, ``team``,
    ``instance`` or ``tree``), ``used_bytes``, ``quota_bytes`` and ``needed_bytes``.
    """


class DocumentTooLarge(TooLarge): ...


class ImportTooLarge(TooLarge): ...


class BodyTooLarge(TooLarge): ...


class Unprocessable(KeepstoneError):
    status = 422


class InvalidPath(Unprocessable): ...


class SecretDetected(Unprocessable): ...


class InvalidDocument(Unprocessable): ...


class InvalidArchive(Unprocessable): ...


class InvalidEdit(Unprocessable):
    """An edit that cannot apply: the text to replace is absent or occurs more than once,
    or the line to insert at is past the end."""


class RateLimited(KeepstoneError):
    status = 429

    def __init__(self, message: str, retry_after: float = 1.0, **details: Any) -> None:
        super().__init__(message, **details)
        self.retry_after = retry_after


class StoreUnavailable(KeepstoneError):
    status = 503


#: What every caller hears while the database is away (the server's log says why).
DATABASE_AWAY = "the database cannot be reached right now; try again shortly"


class DatabaseMissing(StoreUnavailable):
    """The configured PostgreSQL database does not exist. A caller hears the outage's
    message; the operator is told the database's name and the command that creates it,
    which names its host, port and user (:attr:`operator_message`)."""

    code = "store_unavailable"

    def __init__(self, operator_message: str) -> None:
        super().__init__(DATABASE_AWAY)
        self.operator_message = operator_message


class InsufficientStorage(StoreUnavailable):
    """The disk that holds the store is full: writes are refused until space is freed;
    reads and deletes go on (a store keeps a reserve for its deletes). A store outage
    still, to a caller that handles ``StoreUnavailable``; the message names the disk."""

    status = 507


def retry_after(exc: KeepstoneError) -> dict[str, str]:
    """The ``Retry-After`` header of a ``429`` in whole seconds, at least 1 (every face's
    429 carries it); no header for any other error."""
    if isinstance(exc, RateLimited):
        return {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
    return {}


def all_error_classes() -> list[type[KeepstoneError]]:
    """Every class of the tree, root first (used by the docs test)."""
    out: list[type[KeepstoneError]] = [KeepstoneError]
    for cls in out:  # breadth-first: the list grows behind the loop
        out.extend(cls.__subclasses__())
    return out


#: The class an HTTP status stands for: each direct subclass of the root has its own.
_BY_STATUS = {cls.status: cls for cls in KeepstoneError.__subclasses__()}


def error_from_wire(
    status: int,
    content: bytes,
    retry_after: str | None = None,
    *,
    content_type: str = "",
    server: str = "",
) -> KeepstoneError:
    """The error a Keepstone server's answer stands for: the class named by the JSON body's
    ``{"error": {"code", "message", ...}}``, with its details; else (a proxy's HTML page, an
    empty body, another server's JSON) the class of the HTTP ``status``, with a message that
    names the status, says what the body was (``content_type``) and what to check
    (:func:`what_to_check` of ``server``, the client's base URL). ``retry_after`` is the
    answer's Retry-After header."""
    try:
        body: Any = json.loads(content) if content else _NO_JSON
    except (ValueError, RecursionError):
        body = _NO_JSON
    err = body.get("error") if isinstance(body, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    if isinstance(err, dict) and isinstance(code, str) and code:
        said = err.get("message")
        message = said if isinstance(said, str) else f"the server answered HTTP {status}"
        details = {k: v for k, v in err.items() if k not in ("code", "message")}
    else:
        code, details = "", {}
        what = (
            describe_body(content, content_type)
            if body is _NO_JSON
            else "a JSON body that is no Keepstone error (no error.code in it)"
        )
        message = f"the server answered HTTP {status} with {what}: {what_to_check(status, server)}"
    by_code = {cls.code: cls for cls in reversed(all_error_classes())}
    cls = by_code.get(code) or _BY_STATUS.get(status, KeepstoneError)
    if cls is RateLimited:
        try:
            retry = float(retry_after or "1")
        except ValueError:
            retry = 1.0
        return RateLimited(message, retry_after=retry, **details)
    return cls(message, **details)


#: What an answer's body parses to when it holds no JSON at all (JSON ``null`` is None).
_NO_JSON = object()

#: How much of a body that is not JSON a message quotes, in characters.
_SNIPPET = 60


def describe_body(content: bytes, content_type: str = "") -> str:
    """A body that is not JSON, as a message names it: empty, or its media type (of the
    ``Content-Type`` header ``content_type``), its size and its first words, quoted with
    every character that does not print escaped (a page may hold control characters)."""
    if not content:
        return "an empty body"
    media = printable(content_type.split(";")[0].strip()) or "no media type"
    words = " ".join(content.decode("utf-8", "replace").split())
    start = words[:_SNIPPET] + ("..." if len(words) > _SNIPPET else "")
    quoted = printable(json.dumps(start, ensure_ascii=False))
    return f"a body that is not JSON ({media}, {len(content)} bytes: {quoted})"


def printable(text: str) -> str:
    """``text`` with each character that does not print (a control, a format character
    such as a bidirectional override) as its escape, for a one-line message."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def what_to_check(status: int, server: str = "") -> str:
    """What an answer of ``status`` that the server did not shape as a Keepstone answer asks
    the caller to check: behind a 5xx, most often a proxy whose Keepstone server is down;
    else an address (``server``, the client's base URL) that is not a Keepstone server's."""
    if status >= 500:
        behind = f" behind {server}" if server else ""
        return (
            f"check that the Keepstone server{behind} is running, and the log of any proxy "
            "in front of it (which may have answered for it)"
        )
    return (
        f"check that {server or 'the URL'} is the Keepstone server's address "
        "(another server or a proxy may have answered)"
    )
