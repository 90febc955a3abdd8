"""Secret shapes the scanner must not miss: what an attacker once slipped past it.

Keepstone's own API keys (``keepstone_`` + 43 base64url characters, :func:`new_api_key`) and a
Telegram bot token inside its API URL (``/bot<id>:<token>/…``) must be refused and
masked like every other shape; text that only looks like them must not. Fake tokens
are built at run time (no literal token in this file).
"""

from __future__ import annotations

import random
import string

import pytest

from keepstone.errors import SecretDetected
from keepstone.identity.keys import API_KEY_PREFIX, new_api_key
from keepstone.secrets import check_no_secrets, mask, scan

_R = random.Random(11_9)
URLSAFE = string.ascii_letters + string.digits + "-_"


def _rnd(alphabet: str, n: int) -> str:
    return "".join(_R.choice(alphabet) for _ in range(n))


def _telegram_token() -> str:
    return _rnd(string.digits, 10) + ":A" + "A" + _rnd(URLSAFE, 32) + "x"


# --- Keepstone API keys --------------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "{key}",
        "export KEEPSTONE_TOKEN={key}\n",
        "curl -H 'Authorization: Bearer {key}' http://localhost:8000/api/memory\n",
        '{{"token": "{key}"}}',
        "# Setup\nthe bot uses key {key}.\n",
    ],
)
def test_a_keepstone_api_key_is_refused_and_masked(template: str) -> None:
    for _ in range(20):  # several real keys: the shape holds for what new_api_key makes
        key = new_api_key()
        text = template.format(key=key)
        found = scan(text)
        assert [(f.kind, text[f.start : f.end]) for f in found] == [("keepstone_api_key", key)]
        with pytest.raises(SecretDetected) as info:
            check_no_secrets(text)
        assert "keepstone_api_key" in info.value.message
        assert key not in info.value.message
        masked = mask(text)
        assert key not in masked
        assert "[REDACTED:keepstone_api_key]" in masked


@pytest.mark.parametrize(
    "text",
    [
        # Identifiers, settings and prose around Keepstone's own name.
        "run keepstone_memory_import_with_the_skip_strategy_for_each_file now",
        "keepstone_" + "a" * 43,  # one repeated character: a placeholder
        "keepstone_" + "x" * 43,
        "keepstone_" + string.ascii_lowercase + "_0123456789_abcde",  # no capital: snake_case
        "KEEPSTONE_" + _rnd(URLSAFE, 43),  # an environment variable's name, not a key
        API_KEY_PREFIX + _rnd(URLSAFE, 42),  # one character short
        API_KEY_PREFIX + _rnd(URLSAFE, 44),  # one character long
        "my" + API_KEY_PREFIX + _rnd(URLSAFE, 43),  # the prefix inside a longer word
        "API keys start with keepstone_ and are shown once.",
        "set KEEPSTONE_KEY_HASH_SECRET and restart; keepstone_memory and keepstone_records are "
        "tables",
    ],
)
def test_text_that_only_looks_like_a_keepstone_key_passes(text: str) -> None:
    assert [f.kind for f in scan(text)] == []
    check_no_secrets(text)


# --- Telegram bot tokens inside their URL ------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "https://api.telegram.org/bot{token}/sendMessage?chat_id=42",
        "curl https://api.telegram.org/bot{token}/getUpdates\n",
        "https://api.telegram.org/file/bot{token}/photos/file_0.jpg",
        "TELEGRAM_URL=https://api.telegram.org/bot{token}",
        "bare: {token}",
    ],
)
def test_a_telegram_token_inside_its_url_is_found(template: str) -> None:
    token = _telegram_token()
    text = template.format(token=token)
    found = scan(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [("telegram_bot_token", token)]
    with pytest.raises(SecretDetected):
        check_no_secrets(text)
    masked = mask(text)
    assert token not in masked
    assert token.split(":")[1] not in masked
    assert "[REDACTED:telegram_bot_token]" in masked


def test_a_token_glued_to_any_letter_prefix_is_found() -> None:
    # The bot id is a number: a letter before it cannot make it a longer id.
    token = _telegram_token()
    for prefix in ("bot", "x", "/v1/tok", "_"):
        text = prefix + token
        assert [(f.kind, f.start) for f in scan(text)] == [("telegram_bot_token", len(prefix))]


@pytest.mark.parametrize(
    "text",
    [
        # An id longer than Telegram's 16 digits is some other number.
        "https://example.com/bot" + _rnd(string.digits, 17) + ":A" + "A" + _rnd(URLSAFE, 33),
        # Too short after the colon.
        "https://api.telegram.org/bot" + _rnd(string.digits, 10) + ":A" + _rnd(URLSAFE, 20),
        # A time and a word.
        "meeting at bot 12:30 Agenda follows",
    ],
)
def test_telegram_near_misses_pass(text: str) -> None:
    assert scan(text) == []
