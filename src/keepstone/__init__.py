"""Keepstone: memory for AI agents.

``from keepstone import Memory`` (docs/python.md). The names below are loaded on first use:
``import keepstone`` stays cheap (no numpy, no SQLAlchemy), because the CLI reads
``keepstone.__version__`` before it caps the native thread pools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

#: The release: the one place it is written (pyproject.toml reads it from here).
__version__ = "0.1.0"

if TYPE_CHECKING:
    from keepstone.documents import (
        Document,
        DocumentInfo,
        ImportReport,
        Usage,
        VersionInfo,
        WriteResult,
    )
    from keepstone.errors import (
        AlreadyExists,
        Forbidden,
        InvalidEdit,
        InvalidPath,
        InvalidRequest,
        KeepstoneError,
        NotFound,
        PreconditionFailed,
        QuotaExceeded,
        SecretDetected,
        StoreUnavailable,
        Unauthenticated,
    )
    from keepstone.sdk import AsyncMemory, Memory
    from keepstone.service.search import DocumentHit

# The names loaded on first use, by the module that defines them.
_SDK = ("Memory", "AsyncMemory")
#: The results the methods return.
_RESULTS = ("Document", "DocumentInfo", "WriteResult", "Usage", "ImportReport", "VersionInfo")
#: The errors most callers catch; every one is in keepstone.errors.
_ERRORS = (
    "KeepstoneError",
    "NotFound",
    "PreconditionFailed",
    "QuotaExceeded",
    "InvalidPath",
    "SecretDetected",
    "InvalidEdit",
    "AlreadyExists",
    "InvalidRequest",
    "Forbidden",
    "Unauthenticated",
    "StoreUnavailable",
)

__all__ = [  # spelled out, so linters and IDEs read it: the tuples above, and DocumentHit
    "__version__",
    "Memory",
    "AsyncMemory",
    "Document",
    "DocumentInfo",
    "WriteResult",
    "Usage",
    "ImportReport",
    "VersionInfo",
    "DocumentHit",
    "KeepstoneError",
    "NotFound",
    "PreconditionFailed",
    "QuotaExceeded",
    "InvalidPath",
    "SecretDetected",
    "InvalidEdit",
    "AlreadyExists",
    "InvalidRequest",
    "Forbidden",
    "Unauthenticated",
    "StoreUnavailable",
]


def __getattr__(name: str) -> Any:
    # Plain imports (PEP 562): each module is loaded the first time one of its names is.
    value: Any
    if name in _SDK:
        from keepstone import sdk

        value = getattr(sdk, name)
    elif name in _RESULTS:
        from keepstone import documents

        value = getattr(documents, name)
    elif name == "DocumentHit":
        from keepstone.service.search import DocumentHit as value
    elif name in _ERRORS:
        from keepstone import errors

        value = getattr(errors, name)
    else:
        raise AttributeError(f"module 'keepstone' has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
