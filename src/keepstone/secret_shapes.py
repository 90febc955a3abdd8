"""The table of credential shapes the guard recognises (SPEC §3 "Secrets", §6 "Secrets").

Each :class:`Detector` is one provider's *published* token shape (prefix, length, alphabet
and, where the provider publishes one, a checksum or an inner structure checked by a
:data:`Check`); :data:`DETECTORS` lists them in priority order. The engine that runs the
table, resolves overlaps and masks (:func:`keepstone.secrets.scan`, ``check_no_secrets``,
``mask``) is :mod:`keepstone.secrets` with :mod:`keepstone.secret_matching`, the only
modules that should import this one; two shapes that need more than one pattern (private
key blocks, Discord bot tokens) are scanned there too.

Rules every pattern here keeps, so that scanning stays linear in the length of the text
(``tests/unit/test_secrets.py`` checks them): it starts with one of its declared
``prefixes`` or is anchored on ``keywords``, every repetition is bounded, no quantified group
contains another repetition, and what follows a repetition cannot continue its
character class (so :func:`rx` may make every repetition possessive).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DETECTORS", "FILLER", "Check", "Detector", "b64url_decode", "rx"]

Check = Callable[[re.Match[str]], bool]


@dataclass(frozen=True, slots=True)
class Detector:
    """One credential shape: its pattern, and how the engine finds and confirms matches."""

    kind: str  # the kind reported (with ``kinds``: only the family's name)
    pattern: re.Pattern[str]
    # Literal-prefix detectors: every match starts with one of these strings. The engine
    # finds every detector's prefixes in one search and tries the pattern only where one
    # starts (``tests/unit/test_secrets.py`` checks that the list covers every string the
    # pattern can start with).
    prefixes: tuple[str, ...] = ()
    # Anchored detectors only: the pattern can only match near where one of these
    # substrings occurs (see ``anchored``). ``None`` for literal-prefix detectors.
    keywords: tuple[str, ...] | None = None
    # Keywords are looked up in the lower-cased text (context words such as "mailgun").
    fold: bool = False
    # Anchored detectors (patterns that cannot start with a literal: case-insensitive
    # context, a leading character class) never search the whole text: they search the
    # window [keyword, keyword + reach) after each keyword occurrence, or, with
    # ``offsets``, try one match at each of those distances before the keyword.
    anchored: bool = False
    reach: int = 0
    # The capture group that holds the secret (0 = the whole match).
    group: int = 0
    # The character before the match must not continue a word (tokens are whole words).
    bounded: bool = True
    # With ``bounded``: the characters that would continue the token's first run, when
    # that is narrower than a word. A shape that opens with a number (a Telegram bot id)
    # is whole unless a digit precedes it: a letter before it is a path prefix glued on
    # (``/bot<id>:<token>``), not part of the token. ``None``: any word character.
    continues: frozenset[str] | None = None
    check: Check | None = None
    # Documentation placeholders ("ghp_xxxx…", "sk_live_XXXX…") are not credentials.
    filler_ok: bool = False
    # One pattern for a family of shapes: the named group ``k`` picks the kind.
    kinds: dict[str, str] | None = None
    # See ``anchored``: distances before the keyword where a match may start, tried in order.
    offsets: tuple[int, ...] = ()

    def kind_of(self, m: re.Match[str]) -> str:
        if self.kinds is None:
            return self.kind
        return self.kinds[m.group("k") or ""]


# Characters of documentation placeholders ("xxxx", "0000", "****"), never a real secret.
FILLER = frozenset("xX0*.#-_")
# Trailing context: the token is a whole run of its alphabet, not a prefix of a longer run.
_E = r"(?![A-Za-z0-9_-])"
_EH = r"(?![A-Za-z0-9])"
_COUNTED = re.compile(r"(\{[0-9]{1,6}(?:,[0-9]{1,6})?\})(?![+?])")


def rx(pattern: str) -> re.Pattern[str]:
    """Compile with every counted repetition made possessive (``{m,n}`` → ``{m,n}+``).

    Every pattern here is written so that what follows a repetition cannot continue its
    character class, so giving back characters can never produce a match: possessive
    repetition keeps the meaning and removes the backtracking (a failed attempt costs one
    pass over the run, not one per length in the range).
    """
    return re.compile(_COUNTED.sub(r"\1+", pattern))


# --- checks: inner structure of a match ----------------------------------------------


def b64url_decode(part: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        return None


def _jwt_header(m: re.Match[str]) -> bool:
    """A JWT's first part is base64url JSON naming its algorithm (RFC 7515/7519)."""
    raw = b64url_decode(m.group(1))
    if raw is None:
        return False
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(header, dict) and isinstance(header.get("alg"), str)


_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def _bech32_ok(hrp: str, data: str) -> bool:
    """BIP-173 checksum (age encodes its secret keys in bech32)."""
    values = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    for c in data:
        idx = _BECH32.find(c)
        if idx < 0:
            return False
        values.append(idx)
    chk = 1
    for v in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ v
        for i, gen in enumerate((0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)):
            if (top >> i) & 1:
                chk ^= gen
    return chk == 1


def _age_key(m: re.Match[str]) -> bool:
    return _bech32_ok("age-secret-key-", m.group(0)[len("AGE-SECRET-KEY-1") :].lower())


_PLACEHOLDER_PASSWORDS = frozenset(
    {"password", "passwd", "pass", "pwd", "secret", "changeme", "example", "token", "redacted"}
)


def _url_password(m: re.Match[str]) -> bool:
    """``scheme://user:password@host`` with a real scheme and a non-placeholder password."""
    text, start = m.string, m.start()
    # The scheme is checked by hand, backwards from "://", so the pattern can start with
    # that literal (fast prefix search) instead of trying a scheme at every letter.
    i = start
    while (
        i > 0
        and start - i < 32
        and (text[i - 1].isascii() and text[i - 1].isalnum() or text[i - 1] in "+.-")
    ):
        i -= 1
    scheme = text[i:start]
    if len(scheme) < 2 or not scheme[0].isalpha():
        return False
    password = m.group(1)
    if password.lower() in _PLACEHOLDER_PASSWORDS or password[0] in "$<{%(":
        return False
    return len(set(password)) > 1 or password[0] not in FILLER


def _basic_auth(m: re.Match[str]) -> bool:
    try:
        decoded = base64.b64decode(m.group(1), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    user, sep, password = decoded.partition(":")
    return bool(sep and password) and decoded.isprintable()


def _not_example(m: re.Match[str]) -> bool:
    # AWS's documentation keys (AKIAIOSFODNN7EXAMPLE and its secret) are famous fakes.
    return "EXAMPLE" not in m.group(0)


def _mixed(m: re.Match[str]) -> bool:
    """Base64 secrets in an assignment: at least two of upper, lower, digit/symbol."""
    value = m.group(1)
    classes = (
        any(c.isupper() for c in value)
        + any(c.islower() for c in value)
        + any(not c.isalpha() for c in value)
    )
    return classes >= 2 and _not_example(m)


def _keepstone_key(m: re.Match[str]) -> bool:
    """Keepstone's own keys are random base64url: both cases occur (a 43-character key lacks
    one with probability about 2e-10), unlike a snake_case name that starts ``keepstone_``."""
    value = m.group(0)[len("keepstone_") :]
    return any(c.isupper() for c in value) and any(c.islower() for c in value)


def _context(*words: str, window: int = 200) -> Check:
    """The match counts only with one of ``words`` shortly before it (or inside it)."""

    def check(m: re.Match[str]) -> bool:
        around = m.string[max(0, m.start() - window) : m.end()].lower()
        return any(w in around for w in words)

    return check


# --- the shapes ------------------------------------------------------------------------

_ASSIGN = r"""["']?[ \t]{0,4}[:=]{1,2}[ \t]{0,4}["']?"""


def _assigned(
    kind: str,
    name: str,
    value: str,
    keyword: str,
    *,
    offsets: tuple[int, ...] = (0,),
    reach: int = 0,
    check: Check | None = None,
) -> Detector:
    """A secret with no shape of its own, recognised as the value given to a telling name.

    Matches ``name``, an assignment (``=``, ``:``, quotes) and ``value``, whose first
    group is the secret. Anchored on ``keyword`` (looked up lower-cased, since ``name``
    is case-insensitive): a match is tried at each of ``offsets`` before it, or, with
    ``reach``, searched for within ``reach`` characters after it.
    """
    return Detector(
        kind,
        rx(name + _ASSIGN + value),
        keywords=(keyword,),
        fold=True,
        anchored=True,
        reach=reach,
        group=1,
        bounded=False,
        check=check,
        offsets=offsets,
    )


def _token(
    kind: str, prefixes: str | tuple[str, ...], body: str, end: str = _EH, **options: Any
) -> Detector:
    """A token that starts with one of ``prefixes`` (literally), goes on as ``body`` and
    ends where ``end`` holds: the pattern is built from its prefixes, so the two cannot
    disagree. ``options`` are the :class:`Detector`'s other fields."""
    starts = (prefixes,) if isinstance(prefixes, str) else prefixes
    lead = "|".join(re.escape(p) for p in starts)
    if len(starts) > 1:
        lead = f"(?:{lead})"
    return Detector(kind, rx(lead + body + end), starts, **options)


def _anchored(kind: str, pattern: str, keyword: str, **options: Any) -> Detector:
    """A shape that cannot start with a literal, tried only near ``keyword``: at each of
    ``offsets`` before it, or within ``reach`` after it (see :class:`Detector`)."""
    return Detector(kind, rx(pattern), keywords=(keyword,), anchored=True, **options)


DETECTORS: tuple[Detector, ...] = (
    # Keepstone's own API keys (keepstone.identity.keys.new_api_key:
    # "keepstone_" + token_urlsafe(32))
    _token("keepstone_api_key", "keepstone_", r"[A-Za-z0-9_-]{43}", _E, check=_keepstone_key),
    # Amazon Web Services
    _token(
        "aws_access_key_id",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        r"[A-Z2-7]{16}",
        check=_not_example,
        filler_ok=True,
    ),
    _assigned(
        "aws_secret_access_key",
        r"(?i:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)",
        r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        "secret",
        offsets=(0, 3, 4),
        check=_mixed,
    ),
    Detector(
        "aws_session_token",
        rx(
            r"(?:FwoGZXIvYXdz|IQoJb3JpZ2lu)(?<![A-Za-z0-9/+](?:FwoGZXIvYXdz|IQoJb3JpZ2lu))"
            r"[A-Za-z0-9/+]{100,4096}={0,2}(?![A-Za-z0-9/+=])"
        ),
        ("FwoGZXIvYXdz", "IQoJb3JpZ2lu"),
    ),
    # GitHub (github.blog 2021-04-05: prefix, base62, 36+ characters)
    Detector(
        "github_token",
        rx(r"gh(?P<k>[pousr])_[A-Za-z0-9]{36,251}" + _EH),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        kinds={
            "p": "github_personal_access_token",
            "o": "github_oauth_token",
            "u": "github_user_to_server_token",
            "s": "github_server_to_server_token",
            "r": "github_refresh_token",
        },
    ),
    _token("github_fine_grained_token", "github_pat_", r"[A-Za-z0-9]{22}_[A-Za-z0-9]{59,200}"),
    # GitLab (docs.gitlab.com "Token prefixes")
    _token(
        "gitlab_personal_access_token",
        "glpat-",
        r"[A-Za-z0-9_-]{20,300}(?:\.[A-Za-z0-9]{2}\.[A-Za-z0-9]{7,12})?",
        _E,
    ),
    _token("gitlab_deploy_token", "gldt-", r"[A-Za-z0-9_-]{20,300}", _E),
    _token("gitlab_runner_token", ("glrt-", "glrtr-", "GR1348941"), r"[A-Za-z0-9_-]{20,300}", _E),
    _token(
        "gitlab_token",
        tuple(f"gl{k}-" for k in ("cbt", "ptt", "ft", "imt", "agent", "oas", "soat", "ffct", "wt")),
        r"[A-Za-z0-9_-]{20,300}",
        _E,
    ),
    # Slack (api.slack.com/authentication/token-types)
    Detector(
        "slack_token",
        rx(r"xox(?P<k>[abeoprs])-[0-9]{1,13}-[A-Za-z0-9-]{20,250}" + _EH),
        ("xoxa-", "xoxb-", "xoxe-", "xoxo-", "xoxp-", "xoxr-", "xoxs-"),
        kinds={"b": "slack_bot_token", "p": "slack_user_token"}
        | dict.fromkeys("aeors", "slack_token"),
    ),
    _token("slack_app_token", "xapp-", r"[0-9]{1,2}-[A-Z0-9]{9,12}-[0-9]{10,16}-[a-f0-9]{32,80}"),
    Detector(
        "slack_webhook_url",
        rx(
            r"hooks\.slack\.com/(?:services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{20,40}"
            r"|(?:workflows|triggers)/T[A-Z0-9]{6,12}/[A-Za-z0-9/]{30,120})" + _EH
        ),
        ("hooks.slack.com/",),
        bounded=False,
    ),
    # Stripe (docs.stripe.com/keys)
    _token("stripe_secret_key", ("sk_live_", "sk_test_"), r"[A-Za-z0-9]{20,247}"),
    _token("stripe_restricted_key", ("rk_live_", "rk_test_"), r"[A-Za-z0-9]{20,247}"),
    _token("stripe_webhook_secret", "whsec_", r"[A-Za-z0-9+/]{32,88}"),
    # Google
    _token("google_api_key", "AIza", r"[A-Za-z0-9_-]{35}", _E),
    _token("google_oauth_client_secret", "GOCSPX-", r"[A-Za-z0-9_-]{28}", _E),
    _token("google_oauth_access_token", "ya29.", r"[A-Za-z0-9_-]{30,2048}", _E),
    # AI providers
    _token(
        "anthropic_api_key", "sk-ant-", r"(?:api|admin|oat|ort)[0-9]{2}-[A-Za-z0-9_-]{32,256}", _E
    ),
    _token(
        "openai_api_key",
        "sk-",
        r"(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,250}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
        _E,
    ),
    _token("huggingface_token", ("hf_", "api_org_"), r"[A-Za-z0-9]{34}"),
    _token("groq_api_key", "gsk_", r"[A-Za-z0-9]{52}"),
    _token("xai_api_key", "xai-", r"[A-Za-z0-9]{80}"),
    _token("replicate_api_token", "r8_", r"[A-Za-z0-9]{37}"),
    _token("perplexity_api_key", "pplx-", r"[A-Za-z0-9]{48}"),
    # Key material and signed tokens
    Detector(
        "jwt",
        rx(
            r"(eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{10,2048})\.[A-Za-z0-9_-]{10,16384}\.[A-Za-z0-9_-]{16,1024}"
            + _E
        ),
        ("eyJ",),
        check=_jwt_header,
    ),
    _token(
        "age_secret_key",
        "AGE-SECRET-KEY-1",
        r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        check=_age_key,
    ),
    # Package registries, hosting, infrastructure
    _token("npm_access_token", "npm_", r"[A-Za-z0-9]{36}"),
    _token(
        "pypi_api_token",
        ("pypi-AgEIcHlwaS5vcmc", "pypi-AgENdGVzdC5weXBpLm9yZw"),
        r"[A-Za-z0-9_-]{50,1000}",
        _E,
    ),
    _token("docker_hub_token", "dckr_pat_", r"[A-Za-z0-9_-]{27,40}", _E),
    _token("sendgrid_api_key", "SG.", r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", _E),
    _token("twilio_api_key", "SK", r"[0-9a-fA-F]{32}"),
    _token("twilio_auth_token", "AC", r"[0-9a-f]{32}:([0-9a-f]{32})", group=1),
    _assigned(
        "twilio_auth_token",
        r"(?i:auth[_-]?token)",
        r"([0-9a-f]{32})" + _EH,
        "twilio",
        offsets=(),
        reach=250,
        check=_context("twilio"),
    ),
    Detector(
        "digitalocean_token",
        rx(r"do(?P<k>[opr])_v1_[a-f0-9]{64}" + _EH),
        ("dop_v1_", "doo_v1_", "dor_v1_"),
        kinds={
            "p": "digitalocean_personal_access_token",
            "o": "digitalocean_oauth_token",
            "r": "digitalocean_refresh_token",
        },
    ),
    Detector(
        "shopify_token",
        rx(r"shp(?P<k>at|ss|ca|pa)_[a-fA-F0-9]{32}" + _EH),
        ("shpat_", "shpss_", "shpca_", "shppa_"),
        kinds={
            "at": "shopify_access_token",
            "ss": "shopify_shared_secret",
            "ca": "shopify_custom_app_token",
            "pa": "shopify_private_app_token",
        },
    ),
    _assigned(
        "azure_storage_account_key",
        r"(?i:account[_-]?key)",
        r"([A-Za-z0-9+/]{86}==)(?![A-Za-z0-9+/=])",
        "account",
    ),
    _assigned(
        "azure_shared_access_key",
        r"(?i:shared[_-]?access[_-]?key)",
        r"([A-Za-z0-9+/]{43}=)(?![A-Za-z0-9+/=])",
        "shared",
    ),
    _anchored(
        "azure_ad_client_secret",
        r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
        "Q~",
        offsets=(4,),
    ),
    _token("vault_token", ("hvs.", "hvb.", "hvr."), r"[A-Za-z0-9_-]{90,400}", _E),
    _assigned(
        "vault_token",
        # The legacy "s." shape is far too short to stand alone: only as a Vault token value.
        r"(?i:vault[_-]?token|x-vault-token)",
        r"(s\.[A-Za-z0-9]{24})" + _EH,
        "vault",
        offsets=(0, 2),
    ),
    _token("databricks_token", "dapi", r"[a-f0-9]{32}(?:-[0-9]{1,2})?"),
    _token("atlassian_api_token", "ATATT3", r"[A-Za-z0-9_=-]{150,250}", _E),
    Detector(
        "linear_token",
        rx(r"lin_(?:(?P<k>api)_[A-Za-z0-9]{40}|oauth_[a-f0-9]{64})" + _EH),
        ("lin_api_", "lin_oauth_"),
        kinds={"api": "linear_api_key", "": "linear_oauth_token"},
    ),
    _token("postman_api_key", "PMAK-", r"[a-f0-9]{24}-[a-f0-9]{34}"),
    Detector(
        "grafana_token",
        rx(
            r"(?:glsa_[A-Za-z0-9]{32}_[a-fA-F0-9]{8}|glc_eyJ[A-Za-z0-9+/]{30,400}={0,2})"
            r"(?![A-Za-z0-9+/=_])"
        ),
        ("glsa_", "glc_eyJ"),
    ),
    _token(
        "doppler_token",
        tuple(f"dp.{k}." for k in ("pt", "st", "ct", "sa", "scim", "audit")),
        r"[A-Za-z0-9]{40,44}",
    ),
    Detector(
        "sentry_token",
        rx(r"(?:sntryu_[a-f0-9]{64}|sntrys_eyJ[A-Za-z0-9+/=_]{60,400})" + _EH),
        ("sntryu_", "sntrys_"),
    ),
    _token("notion_token", "ntn_", r"[0-9]{11}[A-Za-z0-9]{35}"),
    _token("heroku_api_key", "HRKU-AA", r"[A-Za-z0-9_-]{58}", _E),
    _token("new_relic_user_key", "NRAK-", r"[A-Z0-9]{27}"),
    _token("supabase_token", "sbp_", r"[a-f0-9]{40}"),
    # Chat and mail
    _token(
        "discord_webhook_url",
        ("discord.com/api/webhooks/", "discordapp.com/api/webhooks/"),
        r"[0-9]{17,20}/[A-Za-z0-9_-]{60,68}",
        _E,
        bounded=False,
    ),
    _anchored(
        "telegram_bot_token",
        r"[0-9]{5,16}:A[A-Za-z0-9_-]{34}" + _E,
        ":A",
        offsets=tuple(range(16, 4, -1)),  # leftmost start first
        continues=frozenset("0123456789"),
    ),
    _anchored(
        "mailgun_api_key",
        r"(?:key-[0-9a-f]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})" + _EH,
        "mailgun",
        fold=True,
        reach=250,
        check=_context("mailgun"),
    ),
    _anchored("mailchimp_api_key", r"[0-9a-f]{32}-us[0-9]{1,2}" + _EH, "-us", offsets=(32,)),
    # Credentials written into a URL or an Authorization header
    _token(
        "url_credentials",
        "://",
        r"""[^\s:/?#@\[\]"'<>`]{0,256}:([^\s:/?#@\[\]"'<>`]{1,256})@[A-Za-z0-9\[]""",
        "",
        group=1,
        bounded=False,
        check=_url_password,
        filler_ok=True,
    ),
    _assigned(
        "http_basic_auth",
        r"(?i:authorization)",
        r"(?i:basic) ([A-Za-z0-9+/]{8,400}={0,2})(?![A-Za-z0-9+/=])",
        "authorization",
        check=_basic_auth,
    ),
)
