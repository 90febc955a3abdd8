"""``memory_search`` over a server: POST /api/teams/{team}/memory/search (SPEC §6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from keepstone import http_client
from keepstone.errors import StoreUnavailable


class HttpRecordsSearcher:
    """Searches one team's records on a Keepstone server with a bearer credential.

    ``team`` is the team id; when it is not given it is learned once from the server:
    the ``space_id`` of the caller's ``org`` space carries the team as its tenant
    (``v1:org:<team>:...``), and the server stamps that tenant from the credential.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        team: str | None = None,
        client: httpx.Client | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = http_client.server_url(base_url)
        self._team = http_client.visible_ascii(team, "the team id", "team") if team else None
        self._client = client or httpx.Client(
            timeout=timeout, headers=http_client.bearer(token), transport=http_client.transport()
        )

    def team(self) -> str:
        if self._team is None:
            answer = self._request(
                "a space's usage",
                "GET",
                "/api/memory/usage",
                params={"visibility": "org", "name": "default"},
            )
            parts = answer.text("space_id").split(":")
            if len(parts) < 3 or not parts[2]:
                raise StoreUnavailable(
                    "could not learn the team of this credential from the server; "
                    "pass --team TEAM_ID (or set KEEPSTONE_TEAM)"
                )
            self._team = parts[2]
        return self._team

    def search(
        self,
        query: str,
        repo_id: str | None,
        limit: int | None,
        filters: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"query": query, **(filters or {})}
        if repo_id is not None:
            body["repo_id"] = repo_id
        if limit is not None:
            body["limit"] = limit
        # A read sent as POST: safe to send again if its connection broke unanswered.
        answer = self._request(
            "a records search's answer",
            "POST",
            f"/api/teams/{quote(self.team(), safe='')}/memory/search",
            json=body,
            extensions={http_client.REPEATABLE: True},
        )
        answer.objects("results", optional=True)  # each result is read as an object
        return answer.body

    def close(self) -> None:
        self._client.close()

    def _request(self, what: str, method: str, path: str, **kwargs: Any) -> http_client.Fields:
        """The JSON object the server answers, to be read as ``what``; anything else is the
        error that says what came instead (:func:`keepstone.http_client.send`)."""
        url = self.base_url + path
        response = http_client.send(self._client, self.base_url, method, url, **kwargs)
        return http_client.answer(response, self.base_url, what)
