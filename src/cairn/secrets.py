"""Credential detection and masking (SPEC §3 "Secrets", §6 "Secrets").

The guard recognises credentials by the *published shape* of each provider's tokens
(prefix, length, alphabet and, where the provider publishes one, a checksum or an
inner structure), never by guessing at randomness. That is what lets it run on an
agent's ordinary prose without refusing it: a note saying "rotated the GitHub token"
passes, a pasted ``ghp_…`` token does not. A credential with no published shape (a
bare password, an internal token) is deliberately not recognised; see
``docs/secrets.md`` for the list of kinds and the decisions behind them.

Three functions are the whole interface:

* :func:`scan` lists the :class:`Finding` s of a text (kind, 1-based line, and the
  character span of the secret itself), sorted by start and never overlapping.
* :func:`check_no_secrets` raises :class:`~cairn.errors.SecretDetected` naming the kind
  and the line of the first finding, and never the secret itself. Document writes and
  archive imports call it.
* :func:`mask` replaces each secret with ``[REDACTED:<kind>]``. Records and search
  queries are masked before they are stored, logged or sent anywhere.

Cost is linear in the length of the text. Every pattern starts with a literal (so the
regex engine's prefix search skips ordinary prose at memory speed) or sits behind a
keyword prefilter, every repetition is bounded, and no quantified group contains
another repetition, so no input can make a pattern backtrack more than a constant
amount per position (``tests/unit/test_secrets.py`` checks the patterns' structure and
runs adversarial inputs; ``bench/bench_secrets.py`` prints the throughput).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from cairn.errors import SecretDetected

__all__ = ["KINDS", "Finding", "check_no_secrets", "mask", "scan"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One credential found in a text.

    ``kind`` is the snake_case name of the credential's shape (``github_personal_access_token``,
    ``private_key``, …); ``line`` is 1-based; ``start``/``end`` delimit the secret itself
    (``text[start:end]``), not the words around it: for ``aws_secret_access_key=…`` only the
    value, for a URL only the password.
    """

    kind: str
    line: int
    start: int
    end: int


Check = Callable[[re.Match[str]], bool]


@dataclass(frozen=True, slots=True)
class _Detector:
    kind: str  # the kind reported (with ``kinds``: only the family's name)
    pattern: re.Pattern[str]
    # Prefilter: the pattern can only match where one of these substrings occurs. ``None``
    # means the pattern starts with a literal, and the engine's own prefix search (which
    # skips ordinary text at memory speed) is the prefilter.
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


_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_FILLER = frozenset("xX0*.#-_")
# Trailing context: the token is a whole run of its alphabet, not a prefix of a longer run.
_E = r"(?![A-Za-z0-9_-])"
_EH = r"(?![A-Za-z0-9])"
_COUNTED = re.compile(r"(\{[0-9]{1,6}(?:,[0-9]{1,6})?\})(?![+?])")


def _rx(pattern: str) -> re.Pattern[str]:
    """Compile with every counted repetition made possessive (``{m,n}`` → ``{m,n}+``).

    Every pattern here is written so that what follows a repetition cannot continue its
    character class, so giving back characters can never produce a match: possessive
    repetition keeps the meaning and removes the backtracking (a failed attempt costs one
    pass over the run, not one per length in the range).
    """
    return re.compile(_COUNTED.sub(r"\1+", pattern))


# --- checks: inner structure of a match ----------------------------------------------


def _b64url_decode(part: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        return None


def _jwt_header(m: re.Match[str]) -> bool:
    """A JWT's first part is base64url JSON naming its algorithm (RFC 7515/7519)."""
    raw = _b64url_decode(m.group(1))
    if raw is None:
        return False
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(header, dict) and isinstance(header.get("alg"), str)


# A Discord bot token is base64(bot user id) "." 6 characters "." 27-38 characters. The
# search anchors on the literal dot of the ".xxxxxx." middle (a pattern that started with
# the first part's character class would be tried at every letter of the text) and then
# walks back over the first part, at most 28 characters.
_DISCORD_TAIL = re.compile(r"\.[A-Za-z0-9_-]{6}+\.[A-Za-z0-9_-]{27,38}+(?![A-Za-z0-9_-])")
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def _discord_bot_tokens(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for m in _DISCORD_TAIL.finditer(text):
        dot = m.start()
        i = dot
        while i > 0 and dot - i <= 28 and text[i - 1] in _TOKEN_CHARS:
            i -= 1
        first = text[i:dot]
        if not 24 <= len(first) <= 28 or first[0] not in "MNO":
            continue
        raw = _b64url_decode(first)
        # The first part decodes to the bot's numeric user id (a snowflake).
        if raw is not None and raw.isdigit() and 15 <= len(raw) <= 21:
            spans.append((i, m.end()))
    return spans


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
    return len(set(password)) > 1 or password[0] not in _FILLER


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


def _context(*words: str, window: int = 200) -> Check:
    """The match counts only with one of ``words`` shortly before it (or inside it)."""

    def check(m: re.Match[str]) -> bool:
        around = m.string[max(0, m.start() - window) : m.end()].lower()
        return any(w in around for w in words)

    return check


# --- the shapes ------------------------------------------------------------------------

_ASSIGN = r"""["']?[ \t]{0,4}[:=]{1,2}[ \t]{0,4}["']?"""

_DETECTORS: tuple[_Detector, ...] = (
    # Amazon Web Services
    _Detector(
        "aws_access_key_id",
        _rx(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}" + _EH),
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        check=_not_example,
        filler_ok=True,
    ),
    _Detector(
        "aws_secret_access_key",
        _rx(
            r"(?i:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)"
            + _ASSIGN
            + r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("secret",),
        fold=True,
        anchored=True,
        offsets=(0, 3, 4),
        group=1,
        bounded=False,
        check=_mixed,
    ),
    _Detector(
        "aws_session_token",
        _rx(
            r"(?:FwoGZXIvYXdz|IQoJb3JpZ2lu)(?<![A-Za-z0-9/+](?:FwoGZXIvYXdz|IQoJb3JpZ2lu))"
            r"[A-Za-z0-9/+]{100,4096}={0,2}(?![A-Za-z0-9/+=])"
        ),
        ("FwoGZXIvYXdz", "IQoJb3JpZ2lu"),
    ),
    # GitHub (github.blog 2021-04-05: prefix, base62, 36+ characters)
    _Detector(
        "github_token",
        _rx(r"gh(?P<k>[pousr])_[A-Za-z0-9]{36,251}" + _EH),
        kinds={
            "p": "github_personal_access_token",
            "o": "github_oauth_token",
            "u": "github_user_to_server_token",
            "s": "github_server_to_server_token",
            "r": "github_refresh_token",
        },
    ),
    _Detector(
        "github_fine_grained_token", _rx(r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59,200}" + _EH)
    ),
    # GitLab (docs.gitlab.com "Token prefixes")
    _Detector(
        "gitlab_personal_access_token",
        _rx(r"glpat-[A-Za-z0-9_-]{20,300}(?:\.[A-Za-z0-9]{2}\.[A-Za-z0-9]{7,12})?" + _E),
    ),
    _Detector("gitlab_deploy_token", _rx(r"gldt-[A-Za-z0-9_-]{20,300}" + _E)),
    _Detector(
        "gitlab_runner_token",
        _rx(r"(?:glrt-|glrtr-|GR1348941)[A-Za-z0-9_-]{20,300}" + _E),
        ("glrt", "GR1348941"),
    ),
    _Detector(
        "gitlab_token",
        _rx(r"gl(?:cbt|ptt|ft|imt|agent|oas|soat|ffct|wt)-[A-Za-z0-9_-]{20,300}" + _E),
    ),
    # Slack (api.slack.com/authentication/token-types)
    _Detector(
        "slack_token",
        _rx(r"xox(?P<k>[abeoprs])-[0-9]{1,13}-[A-Za-z0-9-]{20,250}" + _EH),
        kinds={"b": "slack_bot_token", "p": "slack_user_token"}
        | dict.fromkeys("aeors", "slack_token"),
    ),
    _Detector(
        "slack_app_token",
        _rx(r"xapp-[0-9]{1,2}-[A-Z0-9]{9,12}-[0-9]{10,16}-[a-f0-9]{32,80}" + _EH),
    ),
    _Detector(
        "slack_webhook_url",
        _rx(
            r"hooks\.slack\.com/(?:services/T[A-Z0-9]{6,12}/B[A-Z0-9]{6,12}/[A-Za-z0-9]{20,40}"
            r"|(?:workflows|triggers)/T[A-Z0-9]{6,12}/[A-Za-z0-9/]{30,120})" + _EH
        ),
        bounded=False,
    ),
    # Stripe (docs.stripe.com/keys)
    _Detector("stripe_secret_key", _rx(r"sk_(?:live|test)_[A-Za-z0-9]{20,247}" + _EH)),
    _Detector("stripe_restricted_key", _rx(r"rk_(?:live|test)_[A-Za-z0-9]{20,247}" + _EH)),
    _Detector("stripe_webhook_secret", _rx(r"whsec_[A-Za-z0-9+/]{32,88}" + _EH)),
    # Google
    _Detector("google_api_key", _rx(r"AIza[A-Za-z0-9_-]{35}" + _E)),
    _Detector("google_oauth_client_secret", _rx(r"GOCSPX-[A-Za-z0-9_-]{28}" + _E)),
    _Detector("google_oauth_access_token", _rx(r"ya29\.[A-Za-z0-9_-]{30,2048}" + _E)),
    # AI providers
    _Detector(
        "anthropic_api_key", _rx(r"sk-ant-(?:api|admin|oat|ort)[0-9]{2}-[A-Za-z0-9_-]{32,256}" + _E)
    ),
    _Detector(
        "openai_api_key",
        _rx(
            r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,250}"
            r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})" + _E
        ),
    ),
    _Detector(
        "huggingface_token", _rx(r"(?:hf_|api_org_)[A-Za-z0-9]{34}" + _EH), ("hf_", "api_org_")
    ),
    _Detector("groq_api_key", _rx(r"gsk_[A-Za-z0-9]{52}" + _EH)),
    _Detector("xai_api_key", _rx(r"xai-[A-Za-z0-9]{80}" + _EH)),
    _Detector("replicate_api_token", _rx(r"r8_[A-Za-z0-9]{37}" + _EH)),
    _Detector("perplexity_api_key", _rx(r"pplx-[A-Za-z0-9]{48}" + _EH)),
    # Key material and signed tokens
    _Detector(
        "jwt",
        _rx(
            r"(eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{10,2048})\.[A-Za-z0-9_-]{10,16384}\.[A-Za-z0-9_-]{16,1024}"
            + _E
        ),
        check=_jwt_header,
    ),
    _Detector(
        "age_secret_key",
        _rx(r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}" + _EH),
        check=_age_key,
    ),
    # Package registries, hosting, infrastructure
    _Detector("npm_access_token", _rx(r"npm_[A-Za-z0-9]{36}" + _EH)),
    _Detector(
        "pypi_api_token",
        _rx(r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,1000}" + _E),
    ),
    _Detector("docker_hub_token", _rx(r"dckr_pat_[A-Za-z0-9_-]{27,40}" + _E)),
    _Detector("sendgrid_api_key", _rx(r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _E)),
    _Detector("twilio_api_key", _rx(r"SK[0-9a-fA-F]{32}" + _EH)),
    _Detector(
        "twilio_auth_token",
        _rx(r"AC[0-9a-f]{32}:([0-9a-f]{32})" + _EH),
        group=1,
    ),
    _Detector(
        "twilio_auth_token",
        _rx(r"(?i:auth[_-]?token)" + _ASSIGN + r"([0-9a-f]{32})" + _EH),
        ("twilio",),
        fold=True,
        anchored=True,
        reach=250,
        group=1,
        bounded=False,
        check=_context("twilio"),
    ),
    _Detector(
        "digitalocean_token",
        _rx(r"do(?P<k>[opr])_v1_[a-f0-9]{64}" + _EH),
        kinds={
            "p": "digitalocean_personal_access_token",
            "o": "digitalocean_oauth_token",
            "r": "digitalocean_refresh_token",
        },
    ),
    _Detector(
        "shopify_token",
        _rx(r"shp(?P<k>at|ss|ca|pa)_[a-fA-F0-9]{32}" + _EH),
        kinds={
            "at": "shopify_access_token",
            "ss": "shopify_shared_secret",
            "ca": "shopify_custom_app_token",
            "pa": "shopify_private_app_token",
        },
    ),
    _Detector(
        "azure_storage_account_key",
        _rx(r"(?i:account[_-]?key)" + _ASSIGN + r"([A-Za-z0-9+/]{86}==)(?![A-Za-z0-9+/=])"),
        ("account",),
        fold=True,
        anchored=True,
        offsets=(0,),
        group=1,
        bounded=False,
    ),
    _Detector(
        "azure_shared_access_key",
        _rx(
            r"(?i:shared[_-]?access[_-]?key)" + _ASSIGN + r"([A-Za-z0-9+/]{43}=)(?![A-Za-z0-9+/=])"
        ),
        ("shared",),
        fold=True,
        anchored=True,
        offsets=(0,),
        group=1,
        bounded=False,
    ),
    _Detector(
        "azure_ad_client_secret",
        _rx(r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])"),
        ("Q~",),
        anchored=True,
        offsets=(4,),
    ),
    _Detector("vault_token", _rx(r"hv[sbr]\.[A-Za-z0-9_-]{90,400}" + _E)),
    _Detector(
        "vault_token",
        # The legacy "s." shape is far too short to stand alone: only as a Vault token value.
        _rx(r"(?i:vault[_-]?token|x-vault-token)" + _ASSIGN + r"(s\.[A-Za-z0-9]{24})" + _EH),
        ("vault",),
        fold=True,
        anchored=True,
        offsets=(0, 2),
        group=1,
        bounded=False,
    ),
    _Detector("databricks_token", _rx(r"dapi[a-f0-9]{32}(?:-[0-9]{1,2})?" + _EH)),
    _Detector("atlassian_api_token", _rx(r"ATATT3[A-Za-z0-9_=-]{150,250}" + _E)),
    _Detector(
        "linear_token",
        _rx(r"lin_(?:(?P<k>api)_[A-Za-z0-9]{40}|oauth_[a-f0-9]{64})" + _EH),
        kinds={"api": "linear_api_key", "": "linear_oauth_token"},
    ),
    _Detector("postman_api_key", _rx(r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _EH)),
    _Detector(
        "grafana_token",
        _rx(
            r"(?:glsa_[A-Za-z0-9]{32}_[a-fA-F0-9]{8}|glc_eyJ[A-Za-z0-9+/]{30,400}={0,2})"
            r"(?![A-Za-z0-9+/=_])"
        ),
        ("glsa_", "glc_eyJ"),
    ),
    _Detector("doppler_token", _rx(r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{40,44}" + _EH)),
    _Detector(
        "sentry_token",
        _rx(r"(?:sntryu_[a-f0-9]{64}|sntrys_eyJ[A-Za-z0-9+/=_]{60,400})" + _EH),
        ("sntryu_", "sntrys_"),
    ),
    _Detector("notion_token", _rx(r"ntn_[0-9]{11}[A-Za-z0-9]{35}" + _EH)),
    _Detector("heroku_api_key", _rx(r"HRKU-AA[A-Za-z0-9_-]{58}" + _E)),
    _Detector("new_relic_user_key", _rx(r"NRAK-[A-Z0-9]{27}" + _EH)),
    _Detector("supabase_token", _rx(r"sbp_[a-f0-9]{40}" + _EH)),
    # Chat and mail
    _Detector(
        "discord_webhook_url",
        _rx(r"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/[A-Za-z0-9_-]{60,68}" + _E),
        ("discord",),
        bounded=False,
    ),
    _Detector(
        "telegram_bot_token",
        _rx(r"[0-9]{5,16}:A[A-Za-z0-9_-]{34}" + _E),
        (":A",),
        anchored=True,
        offsets=tuple(range(16, 4, -1)),  # leftmost start first
    ),
    _Detector(
        "mailgun_api_key",
        _rx(r"(?:key-[0-9a-f]{32}|[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})" + _EH),
        ("mailgun",),
        fold=True,
        anchored=True,
        reach=250,
        check=_context("mailgun"),
    ),
    _Detector(
        "mailchimp_api_key",
        _rx(r"[0-9a-f]{32}-us[0-9]{1,2}" + _EH),
        ("-us",),
        anchored=True,
        offsets=(32,),
    ),
    # Credentials written into a URL or an Authorization header
    _Detector(
        "url_credentials",
        _rx(r"""://[^\s:/?#@\[\]"'<>`]{0,256}:([^\s:/?#@\[\]"'<>`]{1,256})@[A-Za-z0-9\[]"""),
        ("://",),
        group=1,
        bounded=False,
        check=_url_password,
        filler_ok=True,
    ),
    _Detector(
        "http_basic_auth",
        _rx(
            r"(?i:authorization)"
            + _ASSIGN
            + r"(?i:basic) ([A-Za-z0-9+/]{8,400}={0,2})(?![A-Za-z0-9+/=])"
        ),
        ("authorization",),
        fold=True,
        anchored=True,
        offsets=(0,),
        group=1,
        bounded=False,
        check=_basic_auth,
    ),
)

KINDS: frozenset[str] = frozenset(
    {k for d in _DETECTORS for k in (d.kinds.values() if d.kinds else (d.kind,))}
    | {"private_key", "discord_bot_token"}
)
"""Every kind :func:`scan` can report."""


# --- private key blocks ----------------------------------------------------------------

# The one pattern with an overlapping repetition: bounded to 40, before a literal.
_PEM_HEADER = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = _rx(r"[A-Za-z0-9+/]{40}")
_PEM_MIN_BODY = _rx(r"[A-Za-z0-9+/]{4}")
_PEM_RUN = _rx(r"[A-Za-z0-9+/=\r\n]{0,262144}")
_PEM_LOOKAHEAD = 1024


def _private_keys(text: str) -> list[tuple[int, int]]:
    """Spans of private key blocks: a whole BEGIN…END block with key material in it, or a
    header followed by key material whose footer was cut off (a truncated paste).

    A header quoted alone in prose ("the file starts with -----BEGIN … PRIVATE KEY-----")
    is not a key. Linear: each search for a footer or the next header resumes where the
    last one stopped, so repeated headers cannot make the scan quadratic.
    """
    spans: list[tuple[int, int]] = []
    claimed = 0
    next_end = -2  # cached position of the next "-----END" (-1: none left)
    for m in _PEM_HEADER.finditer(text):
        if m.start() < claimed:
            continue
        body_from = m.end()
        if next_end != -1 and next_end < body_from:
            next_end = text.find("-----END", body_from)
        end_at = next_end
        if end_at != -1:
            # A BEGIN between here and that footer means this block has no footer of its own.
            if text.find("-----BEGIN", body_from, end_at) != -1:
                end_at = -1
        if end_at != -1:
            if not _PEM_MIN_BODY.search(text, body_from, end_at):
                continue
            close = text.find("-----", end_at + 8, end_at + 80)
            stop = close + 5 if close != -1 else end_at + 8
            spans.append((m.start(), stop))
            claimed = stop
            continue
        # Key material must follow the header (after armor lines such as "Version:"),
        # before anything else that starts with dashes.
        limit = text.find("-----", body_from, body_from + _PEM_LOOKAHEAD)
        if limit == -1:
            limit = min(len(text), body_from + _PEM_LOOKAHEAD)
        body = _PEM_BODY.search(text, body_from, limit)
        if body is None:
            continue
        run = _PEM_RUN.match(text, body.start())
        stop = run.end() if run else body.end()
        if stop < len(text) and text[stop] not in "\r\n":
            # The run ran into a word of the following prose: stop at the line before it.
            nl = text.rfind("\n", body.end(), stop)
            stop = nl if nl != -1 else stop
        while stop > body.end() and text[stop - 1] in "\r\n":
            stop -= 1
        spans.append((m.start(), stop))
        claimed = stop
    return spans


# --- the engine ------------------------------------------------------------------------


class _Present:
    """Which keywords occur in a text, each looked up once."""

    __slots__ = ("_folded", "_seen", "_text")

    def __init__(self, text: str) -> None:
        self._text = text
        self._folded: str | None = None
        self._seen: dict[tuple[str, bool], bool] = {}

    def folded(self) -> str:
        # Lower-casing is only for finding keywords; spans come from the original text.
        if self._folded is None:
            self._folded = self._text.lower()
        return self._folded

    def any(self, keywords: Iterable[str], fold: bool) -> bool:
        for kw in keywords:
            key = (kw, fold)
            hit = self._seen.get(key)
            if hit is None:
                hit = kw in (self.folded() if fold else self._text)
                self._seen[key] = hit
            if hit:
                return True
        return False


def _is_filler(value: str) -> bool:
    tail = value[-16:]
    return len(tail) >= 8 and set(tail) <= _FILLER


def _positions(haystack: str, keywords: Iterable[str]) -> list[int]:
    found: list[int] = []
    for kw in keywords:
        pos = haystack.find(kw)
        while pos != -1:
            found.append(pos)
            pos = haystack.find(kw, pos + 1)
    found.sort()
    return found


def _anchored(det: _Detector, text: str, haystack: str) -> Iterator[re.Match[str]]:
    assert det.keywords is not None
    last_end = -1
    if det.offsets:
        for pos in _positions(haystack, det.keywords):
            for back in det.offsets:
                if back <= pos and pos - back >= last_end:
                    m = det.pattern.match(text, pos - back)
                    if m is not None:
                        last_end = m.end()
                        yield m
                        break
        return
    windows: list[tuple[int, int]] = []
    for pos in _positions(haystack, det.keywords):
        hi = min(len(text), pos + det.reach)
        if windows and pos <= windows[-1][1]:
            windows[-1] = (windows[-1][0], hi)  # merged: every character searched once
        else:
            windows.append((pos, hi))
    for lo, hi in windows:
        for m in det.pattern.finditer(text, lo, hi):
            if m.start() < last_end:
                continue
            if m.end() == hi < len(text):
                # The window's end stood in for the end of the text in the trailing
                # lookahead: confirm against the whole text.
                full = det.pattern.match(text, m.start())
                if full is None:
                    continue
                m = full
            last_end = m.end()
            yield m


def _matches(det: _Detector, text: str, present: _Present) -> Iterable[re.Match[str]]:
    if not det.anchored:
        return det.pattern.finditer(text)
    haystack = present.folded() if det.fold else text
    if len(haystack) != len(text):
        # A few characters change length when lower-cased; then positions do not carry
        # over and the whole text is searched instead (correct, just slower).
        return det.pattern.finditer(text)
    return _anchored(det, text, haystack)


def _raw(text: str) -> list[tuple[int, int, int, str]]:
    """Every match of every detector as ``(start, end, priority, kind)``, overlaps included."""
    found: list[tuple[int, int, int, str]] = []
    if not text:
        return found
    present = _Present(text)
    for priority, det in enumerate(_DETECTORS):
        if det.keywords is not None and not present.any(det.keywords, det.fold):
            continue
        for m in _matches(det, text, present):
            if det.bounded and m.start() > 0 and text[m.start() - 1] in _WORD:
                continue
            if det.check is not None and not det.check(m):
                continue
            start, end = m.span(det.group)
            if not det.filler_ok and _is_filler(text[start:end]):
                continue
            found.append((start, end, priority, det.kind_of(m)))
    if "PRIVATE KEY" in text:
        found.extend((s, e, -1, "private_key") for s, e in _private_keys(text))
    late = len(_DETECTORS)
    found.extend((s, e, late, "discord_bot_token") for s, e in _discord_bot_tokens(text))
    return found


def scan(text: str) -> list[Finding]:
    """Every credential in ``text``, sorted by start, none overlapping another.

    Where two shapes overlap the earlier one wins, then the longer, then the more
    specific (a private key block over a token inside it). Runs in time linear in
    ``len(text)``; an empty list means the text is clean.
    """
    raw = sorted(_raw(text), key=lambda r: (r[0], r[0] - r[1], r[2]))
    out: list[Finding] = []
    last_end = 0
    line, line_pos = 1, 0
    for start, end, _priority, kind in raw:
        if start < last_end:
            continue
        line += text.count("\n", line_pos, start)
        line_pos = start
        out.append(Finding(kind, line, start, end))
        last_end = end
    return out


def check_no_secrets(text: str) -> None:
    """Refuse ``text`` if it holds a credential of a published shape.

    Raises :class:`~cairn.errors.SecretDetected` (422 ``secret_detected``) whose message
    names the kind and the 1-based line of the first finding, and how many there are,
    but never the secret; ``details`` carry ``kind`` and ``line``.
    """
    found = scan(text)
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SecretDetected(
            f"content contains a credential ({first.kind}) on line {first.line}{more}; remove "
            "it (store where to find it instead, e.g. an environment variable name) and retry",
            kind=first.kind,
            line=first.line,
        )


_MIN_REPEAT = 12  # a found secret this long is masked wherever else it appears verbatim
_MAX_VALUES = 64
_MAX_ROUNDS = 8


def mask(text: str) -> str:
    """``text`` with every credential replaced by ``[REDACTED:<kind>]``.

    Only the secret span is replaced (``password=[REDACTED:…]`` keeps the words around
    it). Overlapping findings are merged into one marker. A secret found once is also
    masked where it appears again verbatim without a word boundary (``xAKIA…``), and the
    result is scanned again until it is clean, so ``scan(mask(text)) == []`` and no
    scanned secret survives in the output.
    """
    for _ in range(_MAX_ROUNDS):
        raw = _raw(text)
        if not raw:
            return text
        spans = [(s, e, p, k) for s, e, p, k in raw]
        values = {text[s:e]: k for s, e, _p, k in raw if e - s >= _MIN_REPEAT}
        if len(values) <= _MAX_VALUES:
            for value, kind in values.items():
                pos = text.find(value)
                while pos != -1:
                    spans.append((pos, pos + len(value), len(_DETECTORS), kind))
                    pos = text.find(value, pos + len(value))
        spans.sort(key=lambda r: (r[0], r[0] - r[1], r[2]))
        parts: list[str] = []
        last = 0
        cur_start, cur_end, cur_kind = -1, -1, ""
        for start, end, _priority, kind in spans:
            if start < cur_end:
                cur_end = max(cur_end, end)
                continue
            if cur_start >= 0:
                parts.append(text[last:cur_start])
                parts.append(f"[REDACTED:{cur_kind}]")
                last = cur_end
            cur_start, cur_end, cur_kind = start, end, kind
        parts.append(text[last:cur_start])
        parts.append(f"[REDACTED:{cur_kind}]")
        parts.append(text[cur_end:])
        text = "".join(parts)
    return text
