"""The secret detector: every kind found, near misses and prose left alone, masking exact.

Every fake credential here is built at run time by concatenation from a seeded random
source, so this file holds no literal token of a real shape (and push-protection
scanners stay quiet). Nothing here is timed: the adversarial inputs run under an alarm
so that a pattern that started to backtrack fails the test instead of hanging it.
"""

from __future__ import annotations

import base64
import json
import random
import re
import signal
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keepstone import secrets
from keepstone.errors import SecretDetected
from keepstone.secrets import KINDS, Finding, check_no_secrets, mask, scan
from tests.secrets_reference import raw_reference

_R = random.Random(20261130)
UP = string.ascii_uppercase
LO = string.ascii_lowercase
DIG = string.digits
ALNUM = UP + LO + DIG
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def rnd(alphabet: str, n: int) -> str:
    return "".join(_R.choice(alphabet) for _ in range(n))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def bech32_encode(hrp: str, data: list[int]) -> str:
    """BIP-173 encoding (the reference algorithm), to build a valid age key."""
    charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"

    def polymod(values: list[int]) -> int:
        chk = 1
        for v in values:
            top = chk >> 25
            chk = (chk & 0x1FFFFFF) << 5 ^ v
            for i, g in enumerate((0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)):
                chk ^= g if (top >> i) & 1 else 0
        return chk

    expanded = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]
    pm = polymod([*expanded, *data, 0, 0, 0, 0, 0, 0]) ^ 1
    checksum = [(pm >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(charset[d] for d in data + checksum)


def age_key() -> str:
    # 32 key bytes as 5-bit groups: 52 data characters + 6 checksum = 58 after "1".
    bits = "".join(f"{b:08b}" for b in _R.randbytes(32)) + "0000"
    data = [int(bits[i : i + 5], 2) for i in range(0, 260, 5)]
    return bech32_encode("age-secret-key-", data).upper()


def jwt(header: dict[str, object]) -> str:
    payload = {"sub": "1234567890", "name": "Ada", "iat": 1700000000}
    return (
        b64url(json.dumps(header).encode())
        + "."
        + b64url(json.dumps(payload).encode())
        + "."
        + rnd(URLSAFE, 43)
    )


def pem(label: str, body_lines: int = 6) -> str:
    dashes = "-" * 5
    body = "\n".join(rnd(B64, 64) for _ in range(body_lines))
    return f"{dashes}BEGIN {label}{dashes}\n{body}\n{dashes}END {label}{dashes}"


PK = "PRIV" + "ATE KEY"


@dataclass(frozen=True)
class Case:
    """``before + secret + after`` holds one ``kind``; ``near_miss`` holds none."""

    kind: str
    secret: str
    near_miss: str
    before: str = ""
    after: str = ""

    @property
    def id(self) -> str:
        return self.kind


def _cases() -> list[Case]:
    snowflake = "1" + rnd(DIG, 17)
    basic = base64.b64encode(("deploy:" + rnd(ALNUM, 16)).encode()).decode()
    twilio_sid = "A" + "C" + rnd(HEX, 32)
    return [
        Case("aws_access_key_id", "AK" + "IA" + rnd(UP + "234567", 16), "AK" + "IA" + rnd(UP, 15)),
        Case(
            "aws_access_key_id",
            "AS" + "IA" + rnd(UP + "234567", 16),
            "AK" + "IA" + "IOSFODNN7" + "EXAMPLE",  # AWS's documentation key
        ),
        Case(
            "aws_secret_access_key",
            "Ab1/" + rnd(B64, 36),
            "aws_secret_access_key = os.environ['AWS_SECRET_ACCESS_KEY']",
            before="aws_secret_access_key = ",
        ),
        Case(
            "aws_secret_access_key",
            "Zz9+" + rnd(B64, 36),
            "SecretAccessKey: " + "y" * 40,
            before='{"SecretAccessKey": "',
            after='"}',
        ),
        Case(
            "aws_session_token",
            "IQoJ" + "b3JpZ2lu" + rnd(B64, 300),
            "IQoJ" + "b3JpZ2lu" + rnd(B64, 40),
        ),
        Case(
            "github_personal_access_token",
            "gh" + "p_" + rnd(ALNUM, 36),
            "gh" + "p_" + rnd(ALNUM, 35),
        ),
        Case("github_oauth_token", "gh" + "o_" + rnd(ALNUM, 36), "gh" + "o-" + rnd(ALNUM, 36)),
        Case(
            "github_user_to_server_token",
            "gh" + "u_" + rnd(ALNUM, 36),
            "gh" + "u_" + rnd(ALNUM, 20),
        ),
        Case(
            "github_server_to_server_token",
            "gh" + "s_" + rnd(ALNUM, 36),
            "x" + "gh" + "s_" + rnd(ALNUM, 36),  # part of a longer word
        ),
        Case("github_refresh_token", "gh" + "r_" + rnd(ALNUM, 76), "gh" + "r_" + rnd(ALNUM, 30)),
        Case(
            "github_fine_grained_token",
            "github" + "_pat_" + rnd(ALNUM, 22) + "_" + rnd(ALNUM, 59),
            "github" + "_pat_" + rnd(ALNUM, 21) + "_" + rnd(ALNUM, 59),
        ),
        Case(
            "gitlab_personal_access_token",
            "gl" + "pat-" + rnd(URLSAFE, 19) + "x",
            "gl" + "pat-" + rnd(ALNUM, 19),
        ),
        Case("gitlab_deploy_token", "gl" + "dt-" + rnd(ALNUM, 20), "gl" + "dt-" + rnd(ALNUM, 12)),
        Case("gitlab_runner_token", "gl" + "rt-" + rnd(ALNUM, 27), "gl" + "rt-" + rnd(ALNUM, 10)),
        Case("gitlab_token", "gl" + "cbt-" + rnd(ALNUM, 24), "gl" + "xyz-" + rnd(ALNUM, 24)),
        Case(
            "slack_bot_token",
            "xo" + "xb-" + rnd(DIG, 12) + "-" + rnd(DIG, 13) + "-" + rnd(ALNUM, 24),
            "xo" + "xb-not-a-real-token-at-all-really",
        ),
        Case(
            "slack_user_token",
            "xo" + "xp-" + "-".join(rnd(DIG, 12) for _ in range(3)) + "-" + rnd(HEX, 32),
            "xo" + "xp-" + rnd(DIG, 12) + "-short",
        ),
        Case(
            "slack_token",
            "xo" + "xr-" + rnd(DIG, 1) + "-" + rnd(UP + DIG, 146),
            "xo" + "xz-" + rnd(DIG, 1) + "-" + rnd(UP + DIG, 146),
        ),
        Case(
            "slack_app_token",
            "xa" + "pp-1-" + rnd(UP + DIG, 11) + "-" + rnd(DIG, 13) + "-" + rnd(HEX, 64),
            "xa" + "pp-1-" + rnd(UP + DIG, 11) + "-" + rnd(DIG, 13),
        ),
        Case(
            "slack_webhook_url",
            "hooks.slack"
            + ".com/services/T"
            + rnd(UP + DIG, 8)
            + "/B"
            + rnd(UP + DIG, 10)
            + "/"
            + rnd(ALNUM, 24),
            "post to https://hooks.slack.com/services/ (the webhook is in the vault)",
            before="https://",
        ),
        Case(
            "stripe_secret_key", "sk" + "_live_" + rnd(ALNUM, 24), "pk" + "_live_" + rnd(ALNUM, 24)
        ),
        Case(
            "stripe_secret_key", "sk" + "_test_" + rnd(ALNUM, 99), "sk" + "_test_" + rnd(ALNUM, 8)
        ),
        Case(
            "stripe_restricted_key",
            "rk" + "_live_" + rnd(ALNUM, 99),
            "rk" + "_lives_" + rnd(ALNUM, 30),
        ),
        Case(
            "stripe_webhook_secret", "wh" + "sec_" + rnd(ALNUM, 32), "wh" + "sec_" + rnd(ALNUM, 20)
        ),
        Case("google_api_key", "AI" + "za" + rnd(URLSAFE, 35), "AI" + "za" + rnd(URLSAFE, 30)),
        Case(
            "google_oauth_client_secret",
            "GOC" + "SPX-" + rnd(URLSAFE, 28),
            "GOC" + "SPX-" + rnd(ALNUM, 20),
        ),
        Case(
            "google_oauth_access_token", "ya" + "29." + rnd(URLSAFE, 160), "ya" + "29.short_value"
        ),
        Case(
            "anthropic_api_key",
            "sk-" + "ant-api03-" + rnd(URLSAFE, 93) + "AA",
            "sk-" + "ant-" + "api03-" + "short",
        ),
        Case(
            "openai_api_key",
            "sk-" + "proj-" + rnd(ALNUM, 74) + "T3Blbk" + "FJ" + rnd(ALNUM, 74),
            "sk-" + rnd(ALNUM, 48),  # no "OpenAI" marker: not the published shape
        ),
        Case(
            "openai_api_key",
            "sk-" + rnd(ALNUM, 20) + "T3Blbk" + "FJ" + rnd(ALNUM, 20),
            "sk-" + "proj-" + rnd(ALNUM, 20),
        ),
        Case("huggingface_token", "h" + "f_" + rnd(ALNUM, 34), "h" + "f_" + rnd(ALNUM, 33)),
        Case("groq_api_key", "gs" + "k_" + rnd(ALNUM, 52), "gs" + "k_" + rnd(ALNUM, 51)),
        Case("xai_api_key", "xa" + "i-" + rnd(ALNUM, 80), "xa" + "i-" + rnd(ALNUM, 79)),
        Case("replicate_api_token", "r8" + "_" + rnd(ALNUM, 37), "r8" + "_" + rnd(ALNUM, 36)),
        Case("perplexity_api_key", "pp" + "lx-" + rnd(ALNUM, 48), "pp" + "lx-" + rnd(ALNUM, 47)),
        Case(
            "jwt",
            jwt({"alg": "HS256", "typ": "JWT"}),
            jwt({"typ": "JWT", "kid": "k1"}),  # no "alg": three base64 parts, not a JWT
        ),
        Case("age_secret_key", (k := age_key()), k[:-1] + ("Q" if k[-1] != "Q" else "P")),
        Case("npm_access_token", "np" + "m_" + rnd(ALNUM, 36), "np" + "m_" + rnd(ALNUM, 35)),
        Case(
            "pypi_api_token",
            "py" + "pi-" + "AgEIcHlwaS5vcmc" + rnd(URLSAFE, 150),
            "py" + "pi-" + rnd(ALNUM, 80),
        ),
        Case(
            "docker_hub_token",
            "dck" + "r_pat_" + rnd(URLSAFE, 27),
            "dck" + "r_pat_" + rnd(ALNUM, 20),
        ),
        Case(
            "sendgrid_api_key",
            "S" + "G." + rnd(URLSAFE, 22) + "." + rnd(URLSAFE, 43),
            "S" + "G." + rnd(ALNUM, 22) + "." + rnd(ALNUM, 40),
        ),
        Case("twilio_api_key", "S" + "K" + rnd(HEX, 32), "S" + "K" + rnd(HEX, 31)),
        Case(
            "twilio_auth_token",
            rnd(HEX, 32),
            "account " + twilio_sid,  # an account SID alone is an identifier
            before=twilio_sid + ":",
        ),
        Case(
            "twilio_auth_token",
            rnd(HEX, 32),
            "AUTH_TOKEN=" + rnd(HEX, 32),  # no Twilio context
            before="TWILIO_AUTH_TOKEN=",
        ),
        Case(
            "digitalocean_personal_access_token",
            "do" + "p_v1_" + rnd(HEX, 64),
            "do" + "p_v1_" + rnd(HEX, 63),
        ),
        Case(
            "digitalocean_oauth_token", "do" + "o_v1_" + rnd(HEX, 64), "do" + "o_v2_" + rnd(HEX, 64)
        ),
        Case(
            "digitalocean_refresh_token",
            "do" + "r_v1_" + rnd(HEX, 64),
            "do" + "r_v1_" + rnd(ALNUM, 64),
        ),
        Case("shopify_access_token", "shp" + "at_" + rnd(HEX, 32), "shp" + "at_" + rnd(HEX, 31)),
        Case("shopify_shared_secret", "shp" + "ss_" + rnd(HEX, 32), "shp" + "ss_" + rnd(LO, 32)),
        Case(
            "shopify_custom_app_token", "shp" + "ca_" + rnd(HEX, 32), "shp" + "ca_" + rnd(HEX, 16)
        ),
        Case(
            "shopify_private_app_token", "shp" + "pa_" + rnd(HEX, 32), "shp" + "pa_" + rnd(HEX, 33)
        ),
        Case(
            "azure_storage_account_key",
            rnd(B64, 86) + "==",
            "AccountKey=" + rnd(B64, 40) + "==",
            before="DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=",
            after=";EndpointSuffix=core.windows.net",
        ),
        Case(
            "azure_shared_access_key",
            rnd(B64, 43) + "=",
            "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=<from the portal>",
            before="Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;"
            "SharedAccessKey=",
        ),
        Case(
            "azure_ad_client_secret",
            rnd(ALNUM, 3) + "8Q" + "~" + rnd(ALNUM + "_~.-", 33) + "x",
            rnd(LO, 4) + "Q" + "~" + rnd(ALNUM, 34),
        ),
        Case("vault_token", "hv" + "s." + rnd(URLSAFE, 90) + "x", "hv" + "s.short"),
        Case(
            "vault_token",
            "s." + rnd(ALNUM, 24),
            "s." + rnd(ALNUM, 24),  # the legacy shape without its context
            before='VAULT_TOKEN="',
            after='"',
        ),
        Case("databricks_token", "dap" + "i" + rnd(HEX, 32), "dap" + "i" + rnd(HEX, 31)),
        Case(
            "atlassian_api_token",
            "ATA" + "TT3" + rnd(URLSAFE + "=", 185) + "A",
            "ATA" + "TT3" + rnd(ALNUM, 50),
        ),
        Case("linear_api_key", "lin" + "_api_" + rnd(ALNUM, 40), "lin" + "_api_" + rnd(ALNUM, 39)),
        Case(
            "linear_oauth_token", "lin" + "_oauth_" + rnd(HEX, 64), "lin" + "_oauth_" + rnd(HEX, 63)
        ),
        Case(
            "postman_api_key",
            "PM" + "AK-" + rnd(HEX, 24) + "-" + rnd(HEX, 34),
            "PM" + "AK-" + rnd(HEX, 24) + "-" + rnd(HEX, 33),
        ),
        Case(
            "grafana_token",
            "gl" + "sa_" + rnd(ALNUM, 32) + "_" + rnd(HEX, 8),
            "gl" + "sa_" + rnd(ALNUM, 32) + "_" + rnd(HEX, 7),
        ),
        Case("doppler_token", "dp" + ".pt." + rnd(ALNUM, 43), "dp" + ".pt." + rnd(ALNUM, 30)),
        Case("sentry_token", "sntr" + "yu_" + rnd(HEX, 64), "sntr" + "yu_" + rnd(HEX, 63)),
        Case(
            "notion_token", "nt" + "n_" + rnd(DIG, 11) + rnd(ALNUM, 35), "nt" + "n_" + rnd(LO, 46)
        ),
        Case(
            "heroku_api_key",
            "HR" + "KU-AA" + rnd(URLSAFE, 57) + "x",
            "HR" + "KU-AA" + rnd(ALNUM, 57),
        ),
        Case(
            "new_relic_user_key", "NR" + "AK-" + rnd(UP + DIG, 27), "NR" + "AK-" + rnd(UP + DIG, 26)
        ),
        Case("supabase_token", "sb" + "p_" + rnd(HEX, 40), "sb" + "p_" + rnd(HEX, 39)),
        Case(
            "discord_bot_token",
            base64.b64encode(snowflake.encode()).decode().rstrip("=")
            + "."
            + rnd(URLSAFE, 6)
            + "."
            + rnd(URLSAFE, 37)
            + "x",
            # Same shape, but the first part is not a base64 user id.
            "M" + rnd(LO, 23) + "." + rnd(URLSAFE, 6) + "." + rnd(URLSAFE, 38),
        ),
        Case(
            "discord_webhook_url",
            "discord" + ".com/api/webhooks/" + rnd(DIG, 18) + "/" + rnd(URLSAFE, 67) + "x",
            "https://discord.com/api/webhooks/" + rnd(DIG, 18) + " (token elided)",
            before="https://",
        ),
        Case(
            "keepstone_api_key",
            "keep" + "stone_" + rnd(URLSAFE, 41) + "aZ",
            "keep" + "stone_" + rnd(LO, 43),  # snake_case words, not a random key
        ),
        Case(
            "telegram_bot_token",
            rnd(DIG, 10) + ":A" + "A" + rnd(URLSAFE, 32) + "x",
            rnd(DIG, 10) + ":A" + "A" + rnd(ALNUM, 20),
        ),
        Case(
            "mailgun_api_key",
            "ke" + "y-" + rnd(HEX, 32),
            "cache key-" + rnd(HEX, 32),  # no Mailgun context: a cache key name
            before="MAILGUN_API_KEY=",
        ),
        Case("mailchimp_api_key", rnd(HEX, 32) + "-us" + "12", rnd(HEX, 32) + "-uk1"),
        Case(
            "url_credentials",
            rnd(ALNUM, 16),
            "postgresql://app:@db.internal:5432/app",
            before="DATABASE_URL=postgresql://app:",
            after="@db.internal:5432/app",
        ),
        Case(
            "url_credentials",
            rnd(ALNUM, 20),
            "connect to postgresql://user:password@host/db (placeholder)",
            before="redis://:",
            after="@cache:6379/0",
        ),
        Case(
            "http_basic_auth",
            basic,
            "Authorization: Basic " + base64.b64encode(b"no-colon-in-here").decode(),
            before="curl -H 'Authorization: Basic ",
            after="' https://api.example.com",
        ),
        Case(
            "private_key", pem("RSA " + PK), "the file starts with -----BEGIN RSA " + PK + "-----"
        ),
        Case("private_key", pem("OPENSSH " + PK), "-----BEGIN OPENSSH " + PK + "-----\n...\n"),
        Case(
            "private_key",
            pem("EC " + PK),
            "-----BEGIN EC " + PK + "-----\n-----END EC " + PK + "-----",
        ),
        Case("private_key", pem(PK), "-----BEGIN PUBLIC KEY-----\n" + rnd(B64, 64)),
        Case(
            "private_key",
            pem("PGP " + PK + " BLOCK").replace("\n", "\nVersion: GnuPG v2\n\n", 1),
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n" + rnd(B64, 64),
        ),
        Case(
            "private_key",
            # A truncated paste: no footer, but key material under the header.
            "-----BEGIN RSA " + PK + "-----\n" + rnd(B64, 64) + "\n" + rnd(B64, 40),
            "-----BEGIN RSA " + PK + "-----\n" + "(redacted)",
            after="\n\nThat was the old key.",
        ),
    ]


CASES = _cases()


def test_every_kind_has_a_positive_and_a_near_miss() -> None:
    assert {c.kind for c in CASES} == KINDS
    assert len(KINDS) >= 25


def _doc(case: Case) -> tuple[str, int, int]:
    head = "# Notes\nwe rotated the GitHub token today.\nvalue: " + case.before
    text = head + case.secret + case.after + "\nend of notes\n"
    return text, len(head), len(head) + len(case.secret)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_positive_found_with_its_line_and_span(case: Case) -> None:
    text, start, end = _doc(case)
    assert scan(text) == [Finding(case.kind, 3 + case.before.count("\n"), start, end)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_near_miss_is_not_a_secret(case: Case) -> None:
    assert scan(case.near_miss) == []
    assert scan("see: " + case.near_miss + "\n") == []
    check_no_secrets(case.near_miss)
    assert mask(case.near_miss) == case.near_miss


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_check_names_kind_and_line_never_the_secret(case: Case) -> None:
    text, _, _ = _doc(case)
    with pytest.raises(SecretDetected) as info:
        check_no_secrets(text)
    err = info.value
    assert case.kind in err.message
    assert "line 3" in err.message
    assert err.details == {"kind": case.kind, "line": 3}
    assert err.status == 422 and err.code == "secret_detected"
    for piece in (case.secret, case.secret[:12], case.secret[-12:]):
        assert piece not in err.message
        assert piece not in str(err.to_dict())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_mask_replaces_exactly_the_secret_span(case: Case) -> None:
    text, start, end = _doc(case)
    assert mask(text) == text[:start] + f"[REDACTED:{case.kind}]" + text[end:]


def test_findings_are_sorted_non_overlapping_with_running_line_numbers() -> None:
    picked = [c for c in CASES if not c.before and not c.after][:12]
    lines = ["intro"]
    expected: list[tuple[str, int]] = []
    for i, case in enumerate(picked):
        lines.append(f"item {i}: {case.secret}")
        expected.append((case.kind, len(lines)))
        lines.append("plain words between")
    found = scan("\n".join(lines))
    assert [(f.kind, f.line) for f in found] == expected
    assert all(a.end <= b.start for a, b in zip(found, found[1:], strict=False))


def test_overlapping_shapes_report_one_finding() -> None:
    token = "gh" + "p_" + rnd(ALNUM, 36)
    # The token sits inside a private key block: the block wins, one finding.
    block = pem("RSA " + PK).replace("\n", "\n" + token + "\n", 1)
    assert [f.kind for f in scan(block)] == ["private_key"]
    assert mask(block) == "[REDACTED:private_key]"


def test_a_secret_repeated_inside_a_word_is_masked_everywhere() -> None:
    key = "AK" + "IA" + rnd(UP + "234567", 16)
    text = f"key {key} and again x{key}y"
    assert key not in mask(text)
    assert scan(mask(text)) == []


BENIGN = [
    "We rotated the GitHub token and the AWS keys yesterday; nothing leaked.",
    "Deployed commit 3f786850e387550fdab836ed7e6dc881de23001b to production.",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "md5 d41d8cd98f00b204e9800998ecf8427e, sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "run 123e4567-e89b-12d3-a456-426614174000 finished; trace 550e8400-e29b-41d4-a716-446655440000",
    "api_key = os.environ['OPENAI_API_KEY']\npassword = getpass.getpass()\n",
    'token = settings.get("GITHUB_TOKEN")  # never hard-code the password',
    "aws_secret_access_key = ${AWS_SECRET_ACCESS_KEY}",
    "## Setup\n\n- [x] set `SLACK_BOT_TOKEN` in the vault\n- [ ] ask for the Stripe key\n",
    "base64 words: SGVsbG8gd29ybGQ= YmFzZTY0IGlzIGZpbmU= dGhlIHF1aWNrIGJyb3du",
    "https://example.com/path?q=1#frag and http://localhost:8080/health",
    "http://host:8080 and https://user:@host/x and ssh://git@github.com:22/org/repo",
    "git@github.com:org/repo.git, mailto:ops@example.com, user@example.com:443",
    "postgresql://postgres@127.0.0.1:5432/test and redis://127.0.0.1:6379/0",
    "https://user:${DB_PASSWORD}@db/app and https://user:<password>@db/app",
    "https://user:********@db/app",
    "placeholders: " + "gh" + "p_" + "x" * 36 + " and " + "sk" + "_live_" + "X" * 24,
    "AWS docs: " + "AK" + "IA" + "IOSFODNN7" + "EXAMPLE",
    "scikit: sk-learn, sk-" + "ant is not a key, and SK-" + "00 is a part number",
    "a JWT looks like eyJhbGciOi... (three parts) but this is only prose",
    "| key | value |\n|---|---|\n| AccountKey | see Key Vault |\n",
    "The file starts with -----BEGIN OPENSSH " + PK + "----- and ends with END.",
    "bot 123456789:ABC is not a full token; s.short; hvs. prefix explained",
    "Twilio account AC" + "0" * 31 + "1 is just an identifier",
    "Authorization: Bearer $TOKEN",
    "A" * 200,
    "0123456789abcdef" * 20,
]


@pytest.mark.parametrize("text", BENIGN)
def test_benign_text_is_not_a_secret(text: str) -> None:
    assert scan(text) == []
    assert mask(text) == text


def test_empty_and_whitespace() -> None:
    assert scan("") == []
    assert mask("") == ""
    check_no_secrets("\n\n  \t\n")


# --- linear time -----------------------------------------------------------------------

ADVERSARIAL = {
    "A": "A" * 8000,
    "sk-": "sk-" * 2666,
    "begin": "-----BEGIN " * 727,
    "begin-pk": ("-----BEGIN RSA " + PK + "-----") * 258,
    "begin-pk-body": ("-----BEGIN RSA " + PK + "-----\n" + "A" * 64 + "\n") * 80,
    "base64": rnd(B64, 8000),
    "urlsafe": rnd(URLSAFE, 8000),
    "colon-at": "a:" * 4000 + "@",
    "scheme-colon-at": "x://" + "a:" * 4000 + "@h",
    "scheme-repeat": "http://" * 1142,
    "user-pass": "://" + "a" * 4000 + ":" + "b" * 3990 + "@",
    "eyJ": "eyJ" * 2666,
    "eyJ-dots": "eyJ" + "a." * 3999,
    "digits-colon": "1" * 7998 + ":A",
    "xoxb": "xoxb-1-" * 1142,
    "Q~": "1Q~" * 2666,
    "hex": rnd(HEX, 8000),
    "hex-dash": (rnd(HEX, 32) + "-") * 242,
    "aws-ctx": "aws_secret_access_key=" * 363,
    "auth": "Authorization: Basic " * 380,
    "discord": ("M" + "a" * 24 + ".") * 307,
    "mailgun": "mailgun " + "key-" * 2000,
    "newlines": "\n" * 8000,
}


@pytest.fixture
def alarm() -> Iterator[None]:
    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("scan did not finish: a pattern is backtracking")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_adversarial_inputs_finish(name: str, alarm: None) -> None:
    small = ADVERSARIAL[name]
    big = small * 8  # 64k: a quadratic pattern would take ~64x longer and trip the alarm
    for text in (small, big):
        found = scan(text)
        masked = mask(text)
        assert scan(masked) == []
        assert all(0 <= f.start < f.end <= len(text) for f in found)


def _repeats(node: Any, inside: bool, pattern: str) -> Iterator[str]:
    """Walk a parsed regex; yield a complaint for each unbounded or nested repetition."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    items = node.data if isinstance(node, _parser.SubPattern) else node
    for op, av in items:
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            lo, hi, sub = av
            if hi == c.MAXREPEAT:
                yield f"unbounded repetition in {pattern!r}"
            many = hi > 1
            if many and inside:
                yield f"nested repetition in {pattern!r}"
            yield from _repeats(sub, inside or many, pattern)
        elif op is c.SUBPATTERN:
            yield from _repeats(av[-1], inside, pattern)
        elif op in (c.ASSERT, c.ASSERT_NOT):
            yield from _repeats(av[1], inside, pattern)
        elif op is c.BRANCH:
            for alt in av[1]:
                yield from _repeats(alt, inside, pattern)


def _all_patterns() -> list[re.Pattern[str]]:
    found = [d.pattern for d in secrets._DETECTORS]
    found += [v for v in vars(secrets).values() if isinstance(v, re.Pattern)]
    return found


def test_every_pattern_is_bounded_and_unnested() -> None:
    from re import _parser  # type: ignore[attr-defined]

    problems: list[str] = []
    for pattern in _all_patterns():
        problems += _repeats(_parser.parse(pattern.pattern, pattern.flags), False, pattern.pattern)
    assert problems == []


def test_the_structure_check_catches_a_bad_pattern() -> None:
    from re import _parser  # type: ignore[attr-defined]

    for bad in (r"(a+)+b", r"x[a-z]*", r"(?:[0-9]{1,3}\.){1,4}"):
        assert list(_repeats(_parser.parse(bad), False, bad))


# --- properties ------------------------------------------------------------------------

_SECRETS = [c.before + c.secret + c.after for c in CASES]
_FILLER = st.text(alphabet=st.sampled_from(list(ALNUM + " \n\t.,:;=@/_-+'\"#*[]()")), max_size=40)
_PIECES = st.one_of(_FILLER, st.sampled_from(_SECRETS), st.sampled_from(BENIGN))


@settings(max_examples=150, deadline=None)
@given(st.lists(_PIECES, max_size=8))
def test_mask_leaves_no_secret_behind(pieces: list[str]) -> None:
    text = "".join(pieces)
    found = scan(text)
    masked = mask(text)
    assert scan(masked) == []
    for f in found:
        secret = text[f.start : f.end]
        if len(secret) >= 12:
            assert secret not in masked
    if not found:
        assert masked == text


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_masks_clean(text: str) -> None:
    found = scan(text)
    assert found == sorted(found, key=lambda f: f.start)
    assert all(a.end <= b.start for a, b in zip(found, found[1:], strict=False))
    assert scan(mask(text)) == []


# --- the docs and the sources ----------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_docs_list_every_kind() -> None:
    doc = (ROOT / "docs" / "secrets.md").read_text(encoding="utf-8")
    missing = sorted(k for k in KINDS if f"`{k}`" not in doc)
    assert missing == []


@pytest.mark.parametrize(
    "relpath",
    [
        "docs/secrets.md",
        "src/keepstone/secrets.py",
        "src/keepstone/secret_shapes.py",
        "tests/unit/test_secrets.py",
        "bench/bench_secrets.py",
    ],
)
def test_the_repository_holds_no_literal_token(relpath: str) -> None:
    assert scan((ROOT / relpath).read_text(encoding="utf-8")) == []


def test_text_whose_lowercase_changes_length_still_maps_spans() -> None:
    # "İ".lower() is two characters: keyword positions in the lower-cased text no longer
    # line up, so context shapes fall back to searching the original text.
    value = "Ab1/" + rnd(B64, 36)
    text = "İstanbul notes\naws_secret_access_key = " + value + "\n"
    start = text.index(value)
    assert scan(text) == [Finding("aws_secret_access_key", 2, start, start + 40)]
    assert mask(text) == text.replace(value, "[REDACTED:aws_secret_access_key]")


def test_check_message_counts_the_other_findings() -> None:
    one = "np" + "m_" + rnd(ALNUM, 36)
    two = "AK" + "IA" + rnd(UP + "234567", 16)
    with pytest.raises(SecretDetected) as info:
        check_no_secrets(f"a\n{one}\n{two}\n")
    assert "npm_access_token" in info.value.message
    assert "line 2" in info.value.message
    assert "1 more" in info.value.message


# --- the one-pass trigger search finds exactly what a full search finds -------------------

_TRIGGER_WORDS = sorted(
    {p for d in secrets._DETECTORS for p in d.prefixes}
    | {k for d in secrets._DETECTORS for k in d.keywords or ()}
    | {k.upper() for d in secrets._DETECTORS if d.fold for k in d.keywords or ()}
    | {"PRIVATE KEY", "-----BEGIN ", "-----END ", "İ", "K", "ſecret", "Secret", "AccountKey="}
)
_MARKDOWN = [
    "# Title\n\n",
    "## Setup\n",
    "- item one\n- [x] done\n",
    "1. first\n2. second\n",
    "```bash\nexport TOKEN=$TOKEN\n```\n",
    "> quoted: see `config.yaml`\n",
    "| key | value |\n|---|---|\n| a | b |\n",
    "[link](https://example.com/a/b?c=d#e) and <http://localhost:8080/x>\n",
    "**bold** _em_ ~~strike~~ `code_span`\n",
]
_NEAR = [c.near_miss for c in CASES]
_WHOLE = [_doc(c)[0] for c in CASES]
_RANDOM = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
_MIXED = st.one_of(
    _FILLER,
    _RANDOM,
    st.sampled_from(_SECRETS),
    st.sampled_from(_WHOLE),
    st.sampled_from(_NEAR),
    st.sampled_from(BENIGN),
    st.sampled_from(_MARKDOWN),
    st.sampled_from(_TRIGGER_WORDS),
)


def _same_as_reference(text: str) -> None:
    assert secrets._raw(text) == raw_reference(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(_MIXED, max_size=14))
def test_scan_finds_exactly_what_the_reference_engine_finds(pieces: list[str]) -> None:
    text = "".join(pieces)
    _same_as_reference(text)
    # Spliced: a piece cut into the middle of another, so triggers straddle boundaries.
    if len(pieces) >= 2:
        half = len(pieces[0]) // 2
        _same_as_reference(pieces[0][:half] + pieces[1] + pieces[0][half:])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_matches_the_reference_engine(text: str) -> None:
    _same_as_reference(text)


# Stretches of text between the pieces of a large text: none of the anchors, a few, or one
# every few characters, so the trigger search hops, goes on hopping, or hands over to the
# regex engine's own search part way through.
_STRETCH = st.sampled_from(
    [
        "plain words only ",
        "a-b.c_d G J K Q x: ",
        "-",
        ". ",
        "Q~ eyJ AKIA ",
        "ACAC",
        "://://",
        "\n" * 7,
    ]
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(_MIXED, _STRETCH, st.integers(0, 6000)), min_size=1, max_size=8),
    st.booleans(),
)
def test_large_texts_find_every_trigger_the_regex_search_finds(
    parts: list[tuple[str, str, int]], pad_first: bool
) -> None:
    # Past _HOP_FROM the trigger search hops between anchors with str.find; it must yield
    # exactly the matches (and alternatives) of each group's pattern searched whole.
    text = "".join(piece + stretch * (n // len(stretch)) for piece, stretch, n in parts)
    pad = "z" * max(0, secrets._HOP_FROM - len(text))
    text = pad + text if pad_first else text + pad
    assert len(text) >= secrets._HOP_FROM
    for group in (*secrets._EXACT_GROUPS, *secrets._FOLDED_GROUPS):
        hopped = [(m.span(), m.lastindex) for m in secrets._hopping(group, text)]
        searched = [(m.span(), m.lastindex) for m in group.pattern.finditer(text)]
        assert hopped == searched, group.pattern.pattern
    _same_as_reference(text)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_MIXED, _STRETCH, st.integers(0, 300)), min_size=1, max_size=10),
    st.integers(-64, 64),
    st.sampled_from([secrets._ONE_PASS_BELOW, secrets._SHORT_BELOW]),
)
def test_texts_either_side_of_a_length_threshold_find_what_the_reference_finds(
    parts: list[tuple[str, str, int]], shift: int, threshold: int
) -> None:
    # Below _ONE_PASS_BELOW the triggers are found by one joined pattern, from it up by a
    # pattern per group; below _SHORT_BELOW a text without any trigger returns early:
    # texts cut around either length take either way.
    text = "".join(piece + stretch * (n // len(stretch)) for piece, stretch, n in parts)
    size = threshold + shift
    text = (text * (size // max(1, len(text)) + 1))[:size]
    _same_as_reference(text)
    _same_as_reference(text[: len(text) // 3])


@pytest.mark.parametrize(
    "text",
    [*_WHOLE, *_NEAR, *BENIGN, *ADVERSARIAL.values(), "\n".join(_WHOLE), "".join(_SECRETS)],
)
def test_fixed_inputs_match_the_reference_engine(text: str) -> None:
    _same_as_reference(text)
    assert scan(text) == scan_reference(text)


def scan_reference(text: str) -> list[Finding]:
    """``scan`` over the reference engine's raw findings (the same resolution of overlaps)."""
    raw = sorted(raw_reference(text), key=lambda r: (r[0], r[0] - r[1], r[2]))
    out: list[Finding] = []
    last_end = 0
    for start, end, _priority, kind in raw:
        if start >= last_end:
            out.append(Finding(kind, text.count("\n", 0, start) + 1, start, end))
            last_end = end
    return out


def test_overlapping_triggers_are_all_found() -> None:
    # "sk-" inside "sk-ant-", "AC" inside "ACCA", "gsk_" around "sk_": every occurrence of
    # every literal is a trigger, even where occurrences overlap.
    ant = "sk-" + "ant-api03-" + rnd(URLSAFE, 93) + "AA"
    stripe = "sk" + "_live_" + rnd(ALNUM, 24)
    for text in (ant, "g" + stripe, "x " + stripe, "sk-sk-" + ant[3:], "://://a:b@c"):
        _same_as_reference(text)
    assert [f.kind for f in scan("note " + ant)] == ["anthropic_api_key"]


def _leading(node: Any, limit: int = 64) -> tuple[set[str], bool]:
    """Every literal string a parsed pattern must start with, expanded until the first
    item that is not a literal, a small class, a group, an alternation or an optional
    group (lookarounds are skipped: zero width); and whether the whole pattern was
    expanded (if not, the strings are only the start of a match)."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    items = list(node.data if isinstance(node, _parser.SubPattern) else node)
    heads = {""}
    for op, av in items:
        options: set[str] | None = None
        complete = True
        if op is c.LITERAL:
            options = {chr(av)}
        elif op is c.IN and all(o in (c.LITERAL, c.RANGE) for o, _ in av):
            chars: set[str] = set()
            for o, v in av:
                chars |= {chr(v)} if o is c.LITERAL else {chr(x) for x in range(v[0], v[1] + 1)}
            options = chars if len(chars) <= 8 else None
        elif op is c.SUBPATTERN and not av[1]:  # no inline flags (case-insensitive)
            options, complete = _leading(av[-1], limit)
        elif op is c.BRANCH:
            options = set()
            for alt in av[1]:
                more, done = _leading(alt, limit)
                options |= more
                complete = complete and done
        elif op in (c.MAX_REPEAT, c.POSSESSIVE_REPEAT) and (av[0], av[1]) == (0, 1):
            more, complete = _leading(av[2], limit)
            options = {""} | more
        elif op in (c.ASSERT, c.ASSERT_NOT):
            continue
        if not options or len(heads) * len(options) > limit:
            return heads, False
        heads = {h + o for h in heads for o in options}
        if not complete:
            return heads, False
    return heads, True


def test_prefixes_cover_every_start_of_every_pattern() -> None:
    from re import _parser  # type: ignore[attr-defined]

    for det in secrets._DETECTORS:
        if det.anchored:
            assert det.keywords and not det.prefixes, det.kind
            continue
        assert det.prefixes and det.keywords is None, det.kind
        starts, _ = _leading(_parser.parse(det.pattern.pattern, det.pattern.flags))
        uncovered = sorted(s for s in starts if not any(s.startswith(p) for p in det.prefixes))
        assert starts != {""} and uncovered == [], det.kind


def test_the_prefix_check_catches_a_missing_prefix() -> None:
    from re import _parser  # type: ignore[attr-defined]

    starts, complete = _leading(_parser.parse(r"gh[pousr]_[A-Za-z0-9]{36}"))
    assert not complete
    assert starts == {"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}
    assert [s for s in starts if not any(s.startswith(p) for p in ("ghp_", "gho_"))]
