"""Credential detection and masking (SPEC §3, §6)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cairn.errors import SecretDetected


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    line: int
    start: int
    end: int


_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("private_key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
]


def scan(text: str) -> list[Finding]:
    out: list[Finding] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            out.append(Finding(kind, text.count("\n", 0, m.start()) + 1, m.start(), m.end()))
    return sorted(out, key=lambda f: f.start)


def check_no_secrets(text: str) -> None:
    found = scan(text)
    if found:
        f = found[0]
        raise SecretDetected(
            f"content contains a {f.kind} on line {f.line}; remove the credential and retry",
            kind=f.kind,
            line=f.line,
        )


def mask(text: str) -> str:
    parts: list[str] = []
    last = 0
    for f in scan(text):
        if f.start < last:
            continue
        parts.append(text[last : f.start])
        parts.append(f"[REDACTED:{f.kind}]")
        last = f.end
    parts.append(text[last:])
    return "".join(parts)
