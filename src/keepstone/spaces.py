"""Spaces: the addressing of a tree of Markdown documents (SPEC §2).

A space is addressed by a :class:`SpaceRef`, valid by construction: every rule of
SPEC §2 is checked when one is made, here and nowhere else, so a ``SpaceRef`` that
exists is a valid one and no layer checks it again.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass, replace
from enum import StrEnum

from keepstone.errors import InvalidRequest, InvalidSpaceRef
from keepstone.paths import deceptive_character
from keepstone.text import CONTROL


class Visibility(StrEnum):
    PRIVATE = "private"
    BOT = "bot"
    PROJECT = "project"
    CROSS_PROJECT = "cross_project"
    USER = "user"
    ORG = "org"
    GLOBAL = "global"


ALLOWED_VISIBILITIES: tuple[str, ...] = tuple(v.value for v in Visibility)

#: Qualifiers each visibility takes (required): none but these. Others are ignored and
#: left out of the id.
REQUIRED_QUALIFIERS: dict[Visibility, frozenset[str]] = {v: frozenset() for v in Visibility} | {
    Visibility.BOT: frozenset({"project", "bot"}),
    Visibility.PROJECT: frozenset({"project"}),
    Visibility.USER: frozenset({"user"}),
}

MAX_SEGMENT_CHARS = 128
#: Lone surrogates (e.g. a JSON "\udce9" escape) are not Unicode text and cannot be stored.
_SURROGATE = re.compile("[\ud800-\udfff]")

#: Reserved space name of the auto-memory runner (SPEC §9.3).
AUTO_MEMORY_SPACE = "auto-memory"


def parse_visibility(value: str) -> Visibility:
    """The :class:`Visibility` named by ``value``, or an error naming the allowed values."""
    try:
        return Visibility(value)
    except ValueError:
        raise InvalidSpaceRef(
            f"unknown visibility {value!r}; use one of: {', '.join(ALLOWED_VISIBILITIES)}",
            field="visibility",
        ) from None


def validate_segment(field: str, value: str) -> str:
    """Check one qualifier or name: a single non-empty path segment of at most 128 chars."""
    if not isinstance(value, str) or value == "":
        raise InvalidSpaceRef(f"{field} must be a non-empty string", field=field)
    if len(value) > MAX_SEGMENT_CHARS:
        raise InvalidSpaceRef(
            f"{field} is {len(value)} characters long; the limit is {MAX_SEGMENT_CHARS}",
            field=field,
        )
    if value in (".", ".."):
        raise InvalidSpaceRef(f"{field} may not be {value!r}", field=field)
    for bad, label in (("/", "'/'"), ("\\", "'\\'"), (":", "':'")):
        if bad in value:
            raise InvalidSpaceRef(f"{field} may not contain {label}", field=field)
    if CONTROL.search(value):
        raise InvalidSpaceRef(f"{field} may not contain NUL or control characters", field=field)
    if _SURROGATE.search(value):
        raise InvalidSpaceRef(
            f"{field} is not valid Unicode (it contains a lone surrogate)", field=field
        )
    found = deceptive_character(value)
    if found is not None:
        label, why = found
        raise InvalidSpaceRef(
            f"{field} contains {label}, {why}; remove it (type the name again by hand)",
            field=field,
            code_point=label.split(" ", 1)[0],
        )
    return value


@dataclass(frozen=True, slots=True)
class SpaceRef:
    """The address of one space.

    ``tenant`` is the team id (empty for ``global``); ``tenant`` and ``user`` never
    come from a request parameter: the boundary stamps them from the identity.
    """

    visibility: Visibility
    name: str
    tenant: str = ""
    project: str = ""
    bot: str = ""
    user: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.visibility, Visibility):
            # A plain string names a visibility too; keep the enum.
            object.__setattr__(self, "visibility", parse_visibility(str(self.visibility)))
        # Every rule of SPEC §2, or InvalidSpaceRef.
        validate_segment("name", self.name)
        takes = REQUIRED_QUALIFIERS[self.visibility]
        for field in ("project", "bot", "user"):
            value: str = getattr(self, field)
            if field in takes:
                if not value:
                    raise InvalidSpaceRef(
                        f"visibility {self.visibility.value!r} requires {field}", field=field
                    )
                validate_segment(field, value)
            elif value:
                raise InvalidSpaceRef(
                    f"visibility {self.visibility.value!r} does not take {field}", field=field
                )
        if self.tenant:
            if self.visibility is Visibility.GLOBAL:
                raise InvalidSpaceRef("a global space carries no tenant", field="tenant")
            validate_segment("tenant", self.tenant)

    @classmethod
    def build(
        cls,
        visibility: str | Visibility,
        name: str,
        *,
        tenant: str = "",
        project: str | None = None,
        bot: str | None = None,
        user: str | None = None,
    ) -> SpaceRef:
        """Make a ref, dropping the qualifiers the visibility does not take."""
        vis = visibility if isinstance(visibility, Visibility) else parse_visibility(visibility)
        takes = REQUIRED_QUALIFIERS[vis]
        return cls(
            visibility=vis,
            name=name,
            tenant="" if vis is Visibility.GLOBAL else tenant,
            project=(project or "") if "project" in takes else "",
            bot=(bot or "") if "bot" in takes else "",
            user=(user or "") if "user" in takes else "",
        )

    @property
    def is_global(self) -> bool:
        return self.visibility is Visibility.GLOBAL

    @property
    def id(self) -> str:
        """``v1:<visibility>:<tenant>:<project>:<bot>:<user>:<name>``."""
        return ":".join(
            ("v1", self.visibility.value, self.tenant, self.project, self.bot, self.user, self.name)
        )

    def with_tenant(self, tenant: str) -> SpaceRef:
        return replace(self, tenant="" if self.is_global else tenant)


def encode_workdir_key(path: str | os.PathLike[str]) -> str:
    """The project key of a directory: readable basename plus a hash of its real path.

    ``<basename reduced to [A-Za-z0-9._-], at most 40 chars>-<12 hex of sha256(realpath)>``.
    Always a valid segment, whatever the directory is called.
    """
    real = os.path.realpath(os.fspath(path))
    base = os.path.basename(real.rstrip(os.sep)) or "root"
    base = unicodedata.normalize("NFKD", base)
    reduced = re.sub(r"[^A-Za-z0-9._-]", "", base)[:40].strip(".") or "dir"
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{reduced}-{digest}"


def is_directory_spelling(value: str) -> bool:
    """Whether a ``--project`` value is spelled as a directory rather than a name: it holds
    a path separator, or starts with ``.`` or ``~`` (``.``, ``../web``, ``~/src/web``,
    ``/srv/web``). A bare word (``web``) is always a name, even where a folder of that name
    exists, so the same word names the same space from every directory."""
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return any(s in value for s in seps) or value.startswith((".", "~"))


def login_name() -> str | None:
    """The login name of the process's user, the default ``user`` of a user space; None
    when the system cannot tell (no entry for the uid, no ``LOGNAME``): each face says so
    in its own terms."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def current_directory() -> str:
    """The process's current directory, the default project of every space flag, memory
    block and ``keepstone run``; InvalidRequest naming the way out when it was deleted after
    the process started in it, since no project can be named after it then."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise InvalidRequest(
            "the current directory no longer exists (it was deleted after the shell entered "
            "it): cd to a directory that exists, or pass --project NAME|DIR"
        ) from None


def project_key(value: str | None, cwd: str | os.PathLike[str] | None = None) -> str:
    """The ``project`` qualifier a CLI flag, a memory block or the Python API names.

    ``None`` or ``""``: the current directory (``cwd``), encoded by
    :func:`encode_workdir_key`. A directory spelling (:func:`is_directory_spelling`): that
    directory, which must exist, encoded likewise. Anything else is a project *name*, used
    as given, as the HTTP API takes it (``project=web``), so one word reaches one space from
    the API, the CLI, MCP and ``keepstone run``.
    """
    if not value:
        return encode_workdir_key(cwd if cwd is not None else current_directory())
    if is_directory_spelling(value):
        directory = os.path.expanduser(value)
        if cwd is not None and not os.path.isabs(directory):
            directory = os.path.join(os.fspath(cwd), directory)
        if not os.path.isdir(directory):
            raise InvalidSpaceRef(
                f"project {value!r} is spelled as a directory but there is no such directory; "
                "give an existing folder, or a bare name such as 'web'",
                field="project",
            )
        return encode_workdir_key(directory)
    return validate_segment("project", value)
