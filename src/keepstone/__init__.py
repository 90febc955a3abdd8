"""Keepstone: memory for AI agents.

``from keepstone import Memory`` (docs/python.md). The names below are loaded on first use:
``import keepstone`` stays cheap (no numpy, no SQLAlchemy), because the CLI reads
``keepstone.__version__`` before it caps the native thread pools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

#: The release: the one place it is written (pyproject.toml reads it from here).
__version__ = "0.1.0"

if TYPE_CHECKING:  # "X as X" marks each name exported, as __all__ is built, not literal
    from keepstone.documents import Document as Document
    from keepstone.documents import DocumentInfo as DocumentInfo
    from keepstone.documents import ImportReport as ImportReport
    from keepstone.documents import Usage as Usage
    from keepstone.documents import VersionInfo as VersionInfo
    from keepstone.documents import WriteResult as WriteResult
    from keepstone.errors import AlreadyExists as AlreadyExists
    from keepstone.errors import Forbidden as Forbidden
    from keepstone.errors import InvalidEdit as InvalidEdit
    from keepstone.errors import InvalidPath as InvalidPath
    from keepstone.errors import InvalidRequest as InvalidRequest
    from keepstone.errors import KeepstoneError as KeepstoneError
    from keepstone.errors import NotFound as NotFound
    from keepstone.errors import PreconditionFailed as PreconditionFailed
    from keepstone.errors import QuotaExceeded as QuotaExceeded
    from keepstone.errors import SecretDetected as SecretDetected
    from keepstone.errors import StoreUnavailable as StoreUnavailable
    from keepstone.errors import Unauthenticated as Unauthenticated
    from keepstone.sdk import AsyncMemory as AsyncMemory
    from keepstone.sdk import Memory as Memory
    from keepstone.service.search import DocumentHit as DocumentHit

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

#: Spelled from the tuples above, so each name is written once; DocumentHit is its own.
__all__ = ["__version__", *_SDK, *_RESULTS, "DocumentHit", *_ERRORS]


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
