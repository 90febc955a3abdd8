"""Property-based conformance: /openapi.json against the app itself, in-process.

For every operation schemathesis generates requests (fitting the schema, and not)
and checks that no answer is a 5xx and every answer matches the schema (status
codes, content types, headers, bodies). Run without a credential, with a member's
API key and with the admin token.

(schemathesis' pytest loader does not run under pytest 9, so the operations are
driven with plain hypothesis ``@given`` over each operation's strategy.)
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from tests.api.world import World

EXAMPLES = 5
#: Two checks judge the requests rather than the answers, and do not fit this API: a
#: schema cannot say everything the domain validators check (a canonical path, a
#: segment that is not ".."), so a schema-valid request may still be refused with a 4xx
#: naming the rule; and a raw text/markdown body takes any text, so a "schema-invalid"
#: body is still a valid document. Every check of the answers runs (no 5xx, documented
#: status codes, content types, headers and bodies).
EXCLUDED = [positive_data_acceptance, negative_data_rejection]

# The raw bodies of PUT /api/memory/doc and POST /api/memory/import.
schemathesis.serializer.alias("application/gzip", "application/octet-stream")
schemathesis.serializer.alias("text/markdown", "text/plain")


@pytest.fixture(scope="module")
def api_schema(app: FastAPI, world: World) -> Any:
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def _operations(api_schema: Any) -> list[Any]:
    return [result.ok() for result in api_schema.get_all_operations()]


def _credential(world: World, who: str) -> dict[str, str]:
    if who == "member":
        return {"Authorization": f"Bearer {world.keys['member']}"}
    if who == "admin_token":
        return world.headers("admin_token")
    return {}


@pytest.mark.parametrize("who", ["none", "member", "admin_token"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_conforms(api_schema: Any, world: World, who: str, mode: GenerationMode) -> None:
    headers = _credential(world, who)
    operations = _operations(api_schema)
    assert len(operations) >= 20
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers, excluded_checks=EXCLUDED)

        try:
            check()
        except Unsatisfiable:
            # An operation with no input at all (e.g. /healthz) has no negative form.
            assert mode is GenerationMode.NEGATIVE
