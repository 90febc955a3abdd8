"""Property-based conformance: a real ``keepstone serve`` against its own /openapi.json, on
SQLite and PostgreSQL.

The schema is loaded from the live server. For every operation schemathesis generates
requests (fitting the schema, and not), as they come and with NUL (and mostly another
control character) put into every string of the path, the query and the body, and checks
that no answer is a 5xx, every answer matches the schema (status codes, content types,
headers, bodies) and every refusal of a NUL names its field. Each request goes without a
credential, with a member's API key and with the admin token.

(schemathesis' pytest loader does not run under pytest 9, so the operations are driven
with plain hypothesis ``@given`` over each operation's strategy.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from tests.api.conftest import database_fixture
from tests.api.world import ADMIN_TOKEN, PASSWORD, admin_headers, unique
from tests.serving import keepstone_serve, serve_env

pytestmark = pytest.mark.slow

#: Examples per operation, mode and kind (as generated, and with control characters).
EXAMPLES = 2
#: Two checks judge the requests rather than the answers, and do not fit this API: a
#: schema cannot say everything the domain validators check (a canonical path, a
#: segment that is not ".."), so a schema-valid request may still be refused with a 4xx
#: naming the rule; and a raw text/markdown body takes any text, so a "schema-invalid"
#: body is still a valid document. Every check of the answers runs (no 5xx, documented
#: status codes, content types, headers and bodies).
EXCLUDED = [positive_data_acceptance, negative_data_rejection]
#: What a hostile case gets put into each of its strings: NUL always (PostgreSQL refuses it
#: in any text), with another C0, DEL or C1 control character in most.
CONTROL = ("\x00", "\x1b\x00", "\x00\x7f", "\x85\x00")

# The raw bodies of PUT /api/memory/doc and POST /api/memory/import.
schemathesis.serializer.alias("application/gzip", "application/octet-stream")
schemathesis.serializer.alias("text/markdown", "text/plain")

database = database_fixture("database")


@pytest.fixture(scope="module")
def server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("home")
    env = serve_env(home, ADMIN_TOKEN, KEEPSTONE_INDEXER="off")
    with keepstone_serve("--database", database, env=env, log=home / "serve.log") as served:
        yield served.url


@pytest.fixture(scope="module")
def member_key(server: str) -> str:
    """An API key of a member of a team, made through the admin API as the world does."""
    with httpx.Client(base_url=server, headers=admin_headers()) as admin:

        def post(path: str, body: dict[str, object]) -> dict[str, Any]:
            r = admin.post(path, json=body)
            assert r.status_code == 201, r.text
            out: dict[str, Any] = r.json()
            return out

        org = post("/api/admin/orgs", {"name": "Acme", "plan": "pro_plus"})["id"]
        team = post("/api/admin/teams", {"org_id": org, "name": "core"})["id"]
        body = {"email": f"{unique('member')}@example.com", "password": PASSWORD}
        user = post("/api/admin/users", body)["id"]
        post(f"/api/admin/teams/{team}/members", {"user_id": user, "role": "member"})
        key = post("/api/admin/api-keys", {"user_id": user, "team_id": team, "name": "st"})
        return str(key["key"])


@pytest.fixture(scope="module")
def api_schema(server: str) -> Any:
    return schemathesis.openapi.from_url(f"{server}/openapi.json")


def _put(value: Any, chars: str) -> Any:
    """``value`` with ``chars`` put into the middle of every string in it."""
    if isinstance(value, str):
        return value[: len(value) // 2] + chars + value[len(value) // 2 :]
    if isinstance(value, dict):
        return {key: _put(item, chars) for key, item in value.items()}
    if isinstance(value, list):
        return [_put(item, chars) for item in value]
    return value


def _with_control(drawn: tuple[Any, str]) -> Any:
    """The case with the characters put into its path parameters (percent-encoded, as
    schemathesis encodes them), query parameters and body. Headers stay as they are: HTTP
    refuses control characters there before any server sees them."""
    case, chars = drawn
    if case.path_parameters:
        case.path_parameters = _put(case.path_parameters, quote(chars, safe=""))
    if case.query:
        case.query = _put(case.query, chars)
    if isinstance(case.body, dict | list | str):
        case.body = _put(case.body, chars)
    return case


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def _holds_nul(case: Any) -> bool:
    return any("%00" in text for text in _strings(case.path_parameters)) or any(
        "\x00" in text for text in _strings([case.query, case.body])
    )


def _names_the_field(label: str, response: Any) -> None:
    """A refusal of a control character names the field that holds it: the check of each
    field (``keepstone.text``) does; the database's last net for a NUL no such check caught
    cannot."""
    if response.status_code != 400:
        return
    error = response.json().get("error", {})
    if "NUL" in error.get("message", ""):
        assert error.get("field"), f"{label}: a 400 naming no field: {response.text}"


@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_conforms(api_schema: Any, member_key: str, server: str, mode: GenerationMode) -> None:
    """Each generated request is sent once per credential (none, a member's API key, the
    admin token): what a generated request is does not depend on who sends it."""
    credentials = [{}, {"Authorization": f"Bearer {member_key}"}, admin_headers()]
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20
    sent: Counter[bool] = Counter()
    for operation in operations:
        plain = operation.as_strategy(generation_mode=mode)
        hostile = st.tuples(plain, st.sampled_from(CONTROL)).map(_with_control)
        for cases in (plain, hostile):

            @given(case=cases)
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
                database=None,
            )
            def check(case: Any) -> None:
                for headers in credentials:
                    response = case.call_and_validate(
                        base_url=server,
                        headers=headers,
                        additional_checks=[not_a_server_error],
                        excluded_checks=EXCLUDED,
                    )
                    _names_the_field(case.operation.label, response)
                    sent[_holds_nul(case)] += 1

            try:
                check()
            except Unsatisfiable:
                # An operation with no input at all (e.g. /healthz) has no negative form.
                assert mode is GenerationMode.NEGATIVE
    # Not vacuous: requests carrying NUL really went out.
    assert sent[True] > 0, sent
