"""Every UI route with its query and form fields taken away or swapped for hostile text, on
SQLite and PostgreSQL: each answer is below 500. A refusal says what was wrong; a 500 is a
page that met input it did not expect (a space named by half its fields rendered as a
whole one, a number that is not one).

Each route starts from its row in the access table (tests/web/policy.py): a request that
succeeds, sent as a credential the row allows. Hypothesis then drops or replaces each of
its fields and now and then adds one more, with text that is empty, huge, not a number,
a path that climbs, control characters, markup or a string of non-ASCII letters.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.world import World
from tests.web.conftest import add_outsider
from tests.web.policy import OK, ROWS, UiRow, send

#: Long: handed out first under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.slow

#: Requests per route and database: derandomized, so a run is the same on every machine.
EXAMPLES = 12

#: The credentials a row is tried as, the first it allows: its most ordinary caller.
CALLERS = ("member", "viewer", "admin", "org_owner", "super_admin", "none")

#: What a field may become, beside any text.
HOSTILE = st.text(max_size=40) | st.sampled_from(
    [
        "", " ", "0", "-1", "99999999999999999999999", "1e309", "nan", "\x00", "a\x00b",
        "\x1b[31m", "..", "/", "a/../b.md", "2026-13-40", "2026-01-01T00:00:00Z",
        "<script>alert(1)</script>", "%", "%00", "é" * 300,
    ]
)  # fmt: skip

#: Field names the UI reads somewhere, for the field a request gains.
NAMES = ("name", "visibility", "project", "bot", "path", "to", "version", "from", "limit",
         "cursor", "sort", "dir", "q", "since", "until", "tags", "actor_kind", "space")  # fmt: skip

FUZZED = [row for row in ROWS if not row.fresh_session]


def caller(row: UiRow) -> str:
    return next(cred for cred in CALLERS if row.expect.get(cred) == OK)


def mutated(data: st.DataObject, fields: dict[str, str]) -> dict[str, str]:
    out = dict(fields)
    for key in fields:
        change = data.draw(st.sampled_from(("keep", "drop", "swap", "swap")))
        if change == "drop":
            del out[key]
        elif change == "swap":
            out[key] = data.draw(HOSTILE)
    if data.draw(st.integers(0, 3)) == 0:
        out[data.draw(st.sampled_from(NAMES))] = data.draw(HOSTILE)
    return out


@pytest.mark.parametrize("row", FUZZED, ids=[row.id for row in FUZZED])
def test_no_field_makes_a_page_fail(row: UiRow, world: World, client: TestClient) -> None:
    add_outsider(world)
    cred = caller(row)

    @given(data=st.data())
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(data: st.DataObject) -> None:
        req = row.build(world)
        req = replace(req, params=mutated(data, req.params), data=mutated(data, req.data))
        status, _, body = send(client, world, row, cred, req)
        assert status < 500, (req.params, req.data, body[-600:])

    check()
