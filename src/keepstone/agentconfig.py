"""The agent configuration file: the memory block and the auto-memory switch (SPEC §9.1).

A configuration file is YAML::

    memory:
      enabled: true
      visibility: bot          # bot|project|cross_project|user|org|global
      scope: {name: notes, bot: whats-next}
      write: true              # default; write: false is the read-only shape
      autoload: [MEMORY.md]    # documents read into the agent's context at start
    auto_memory: off           # on|off
    backend: claude_code       # claude_code|claw|pi|kimi|grok|opencode|codex

:func:`parse_config` reads it with PyYAML's node API (``yaml.compose``) so that every
value keeps its line, and returns the parsed :class:`AgentConfig` together with the
:class:`Diagnostic` list that ``keepstone validate`` prints as ``FILE:LINE: CODE message``.

Codes (the four of SPEC §9.1, plus two for a file that cannot be read at all):

* ``C100`` error — not YAML, or not a mapping at the top.
* ``C101`` error — a field of the wrong type or an invalid value (a scope segment,
  an autoload path, an unknown backend...).
* ``C131`` error — ``auto_memory`` is not on/off.
* ``C132`` warning — ``auto_memory: on`` on a backend that ignores it.
* ``C170`` error — a visibility outside the six (``private`` included).
* ``C319`` warning — ``visibility: global`` with write left on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from keepstone.errors import InvalidPath, InvalidRequest, KeepstoneError
from keepstone.paths import validate_doc_path
from keepstone.spaces import Visibility, is_directory_spelling, validate_segment

#: Backends that consume ``auto_memory: on`` (SPEC §9.1).
AUTO_MEMORY_BACKENDS: frozenset[str] = frozenset({"claude_code", "claw", "pi"})
#: Backends that exist but ignore auto-memory.
INERT_BACKENDS: frozenset[str] = frozenset({"kimi", "grok", "opencode", "codex"})
ALL_BACKENDS: tuple[str, ...] = ("claude_code", "claw", "pi", "kimi", "grok", "opencode", "codex")

#: The visibilities an agent configuration may name: every one but ``private`` (C170).
AGENT_VISIBILITIES: tuple[str, ...] = tuple(
    v.value for v in Visibility if v is not Visibility.PRIVATE
)

_TRUE = {"true", "on", "yes", "y"}
_FALSE = {"false", "off", "no", "n"}


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding of ``keepstone validate``; ``line`` is 1-based."""

    file: str
    line: int
    code: str
    severity: Severity
    message: str

    def render(self) -> str:
        """``FILE:LINE: CODE message`` (the message starts with the severity)."""
        return f"{self.file}:{self.line}: {self.code} {self.severity.value}: {self.message}"


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """The ``memory:`` block: which space the tools address and what they may do.

    ``project`` is a project name (a bare word, used as given), or a directory (spelled
    with a separator or a leading ``.``/``~``; encoded into a project key when the ref is
    built) already resolved against the configuration file's directory; ``None`` means the
    current working directory, like ``keepstone memory --project``.
    """

    enabled: bool = True
    visibility: Visibility = Visibility.BOT
    name: str = "default"
    bot: str | None = None
    project: str | None = None
    user: str | None = None
    write: bool = True
    write_explicit: bool = False
    autoload: tuple[str, ...] = ()

    @property
    def can_write(self) -> bool:
        """Whether a run gets ``memory_write``: never on global, never with ``write: false``."""
        return self.enabled and self.write and self.visibility is not Visibility.GLOBAL


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """A parsed configuration file. ``memory`` is None when the file has no memory block."""

    path: str
    memory: MemoryBlock | None = None
    auto_memory: bool | None = None
    backend: str | None = None
    diagnostics: tuple[Diagnostic, ...] = field(default_factory=tuple)

    @property
    def has_errors(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.diagnostics)

    @property
    def directory_name(self) -> str:
        """The name of the directory holding the file (the bot id of last resort)."""
        return Path(os.path.abspath(self.path)).parent.name

    def raise_on_errors(self) -> None:
        """Raise InvalidRequest naming the first error, for commands that need a valid file."""
        for d in self.diagnostics:
            if d.severity is Severity.ERROR:
                raise InvalidRequest(
                    f"{d.file}:{d.line}: {d.code} {d.message} "
                    f"(run 'keepstone validate {d.file}' for every finding)"
                )


def parse_bool_word(value: str) -> bool | None:
    """``on``/``off`` and the other YAML 1.1 boolean words, or None when not one."""
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


class _Collector:
    def __init__(self, file: str) -> None:
        self.file = file
        self.items: list[Diagnostic] = []

    def add(self, node: Node | None, code: str, severity: Severity, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        self.items.append(Diagnostic(self.file, line, code, severity, message))

    def error(self, node: Node | None, code: str, message: str) -> None:
        self.add(node, code, Severity.ERROR, message)


def _mapping(node: MappingNode) -> dict[str, tuple[Node, Node]]:
    out: dict[str, tuple[Node, Node]] = {}
    for key, value in node.value:
        if isinstance(key, ScalarNode):
            out[str(key.value)] = (key, value)
    return out


def _scalar(node: Node) -> str | None:
    if isinstance(node, ScalarNode):
        return str(node.value)
    return None


def _bool_field(c: _Collector, node: Node, label: str, default: bool) -> bool:
    raw = _scalar(node)
    value = parse_bool_word(raw) if raw is not None else None
    if value is None:
        c.error(node, "C101", f"{label} must be true or false, not {raw!r}")
        return default
    return value


def _segment_field(c: _Collector, node: Node, label: str) -> str | None:
    raw = _scalar(node)
    if raw is None or raw == "":
        c.error(node, "C101", f"{label} must be a non-empty string")
        return None
    try:
        return validate_segment(label, raw)
    except KeepstoneError as exc:
        c.error(node, "C101", exc.message)
        return None


#: The keys of the ``memory:`` block.
_MEMORY_KEYS = ("enabled", "visibility", "scope", "write", "autoload")


def _parse_memory(c: _Collector, node: Node, base_dir: Path) -> MemoryBlock | None:
    if not isinstance(node, MappingNode):
        c.error(node, "C101", "memory must be a mapping (enabled, visibility, scope, ...)")
        return None
    fields = _mapping(node)
    enabled = True
    if "enabled" in fields:
        enabled = _bool_field(c, fields["enabled"][1], "memory.enabled", True)
    vis_node = fields["visibility"][1] if "visibility" in fields else None
    visibility = Visibility.BOT if vis_node is None else _visibility_field(c, vis_node)
    scope: dict[str, str] = {}
    project: str | None = None
    if "scope" in fields:
        scope, project = _scope_field(c, fields["scope"][1], base_dir)
    write, write_explicit = True, False
    write_node: Node | None = None
    if "write" in fields:
        write_node = fields["write"][1]
        write = _bool_field(c, write_node, "memory.write", True)
        write_explicit = True
    autoload = _autoload_field(c, fields["autoload"][1]) if "autoload" in fields else ()
    for key, (key_node, _value) in fields.items():
        if key not in _MEMORY_KEYS:
            c.error(
                key_node,
                "C101",
                f"memory takes enabled, visibility, scope, write and autoload, not {key!r}",
            )
    if visibility is Visibility.GLOBAL and write and enabled:
        c.add(
            write_node or vis_node,
            "C319",
            Severity.WARNING,
            "visibility: global with write left on; a run never gets memory_write on the "
            "global space (it gets the read-only tools, and a notice that writes are refused); "
            "set write: false to say so",
        )
    return MemoryBlock(
        enabled=enabled,
        visibility=visibility,
        name=scope.get("name", "default"),
        bot=scope.get("bot"),
        project=project,
        user=scope.get("user"),
        write=write,
        write_explicit=write_explicit,
        autoload=autoload,
    )


def _visibility_field(c: _Collector, node: Node) -> Visibility:
    """``memory.visibility``: one of :data:`AGENT_VISIBILITIES` (else C170, and ``bot``)."""
    raw = _scalar(node)
    if raw in AGENT_VISIBILITIES:
        return Visibility(raw)
    why = (
        "private has no durable home for an agent run"
        if raw == Visibility.PRIVATE.value
        else "it is not a visibility"
    )
    c.error(
        node,
        "C170",
        f"visibility {raw!r} is not allowed ({why}); use one of: " + ", ".join(AGENT_VISIBILITIES),
    )
    return Visibility.BOT


def _scope_field(c: _Collector, node: Node, base_dir: Path) -> tuple[dict[str, str], str | None]:
    """``memory.scope``: its name, bot and user segments, and its project (a name, or a
    directory resolved against ``base_dir``)."""
    scope: dict[str, str] = {}
    project: str | None = None
    if not isinstance(node, MappingNode):
        c.error(node, "C101", "memory.scope must be a mapping like {name: notes}")
        return scope, project
    for key, (key_node, value_node) in _mapping(node).items():
        if key == "project":
            project = _project_field(c, value_node, base_dir)
        elif key in ("name", "bot", "user"):
            seg = _segment_field(c, value_node, f"memory.scope.{key}")
            if seg is not None:
                scope[key] = seg
        else:
            c.error(
                key_node, "C101", f"memory.scope takes name, bot, project and user, not {key!r}"
            )
    return scope, project


def _project_field(c: _Collector, node: Node, base_dir: Path) -> str | None:
    raw = _scalar(node)
    if not raw:
        c.error(node, "C101", "memory.scope.project must be a project name or a directory")
        return None
    if is_directory_spelling(raw):
        return str((base_dir / os.path.expanduser(raw)).resolve())
    return _segment_field(c, node, "memory.scope.project")


def _autoload_field(c: _Collector, node: Node) -> tuple[str, ...]:
    """``memory.autoload``: a list of document paths (each checked)."""
    items = node.value if isinstance(node, SequenceNode) else None
    if items is None:
        c.error(node, "C101", "memory.autoload must be a list like [MEMORY.md]")
        return ()
    autoload: list[str] = []
    for item in items:
        raw = _scalar(item)
        try:
            autoload.append(validate_doc_path(raw))
        except InvalidPath as exc:
            c.error(item, "C101", f"memory.autoload: {exc.message}")
    return tuple(autoload)


def parse_config_text(text: str, file: str, base_dir: Path | None = None) -> AgentConfig:
    """Parse configuration ``text`` (named ``file`` in diagnostics); never raises."""
    c = _Collector(file)
    base = base_dir if base_dir is not None else Path(os.path.abspath(file)).parent
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        c.items.append(Diagnostic(file, line, "C100", Severity.ERROR, f"not valid YAML: {problem}"))
        return AgentConfig(path=file, diagnostics=tuple(c.items))
    if root is None:
        return AgentConfig(path=file)
    if not isinstance(root, MappingNode):
        c.error(root, "C100", "the configuration must be a mapping (memory:, auto_memory:, ...)")
        return AgentConfig(path=file, diagnostics=tuple(c.items))
    fields = _mapping(root)
    memory = _parse_memory(c, fields["memory"][1], base) if "memory" in fields else None
    backend: str | None = None
    if "backend" in fields:
        b_node = fields["backend"][1]
        raw = _scalar(b_node)
        if raw in ALL_BACKENDS:
            backend = raw
        else:
            c.error(
                b_node, "C101", f"backend {raw!r} is unknown; use one of: {', '.join(ALL_BACKENDS)}"
            )
    auto_memory: bool | None = None
    if "auto_memory" in fields:
        am_node = fields["auto_memory"][1]
        raw = _scalar(am_node)
        auto_memory = parse_bool_word(raw) if raw is not None else None
        if auto_memory is None:
            c.error(am_node, "C131", f"auto_memory must be on or off, not {raw!r}")
        elif auto_memory and backend in INERT_BACKENDS:
            c.add(
                am_node,
                "C132",
                Severity.WARNING,
                f"auto_memory: on has no effect on backend {backend!r}; only "
                + ", ".join(sorted(AUTO_MEMORY_BACKENDS))
                + " consume it",
            )
    return AgentConfig(
        path=file,
        memory=memory,
        auto_memory=auto_memory,
        backend=backend,
        diagnostics=tuple(sorted(c.items, key=lambda d: d.line)),
    )


def load_config(path: str | os.PathLike[str]) -> AgentConfig:
    """Read and parse a configuration file; an unreadable file is an InvalidRequest."""
    file = os.fspath(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read configuration {file!r}: {exc}") from None
    return parse_config_text(text, file)
