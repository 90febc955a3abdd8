"""Who made a change, by name: the people and API keys a history's actors name by id
(``user:<id> key:<id>``), read in one query each (docs/history.md, "Activity")."""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keepstone.db import read_transaction
from keepstone.identity import schema as t


class ActorNames:
    """The names of users and API keys over the identity tables of ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def actor_names(
        self, user_ids: Collection[str], key_ids: Collection[str]
    ) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        """(each user's email — its name when it has no email —, each key's (label, user
        id)); an id that names no row (a deleted user or key) is left out."""
        users: dict[str, str] = {}
        keys: dict[str, tuple[str, str]] = {}
        with read_transaction(self.engine) as conn:
            if key_ids:
                query = sa.select(t.api_keys.c.id, t.api_keys.c.name, t.api_keys.c.user_id)
                for row in conn.execute(query.where(t.api_keys.c.id.in_(sorted(key_ids)))):
                    keys[row.id] = (row.name, row.user_id)
            wanted = set(user_ids) | {user for _, user in keys.values()}
            if wanted:
                query = sa.select(t.users.c.id, t.users.c.email, t.users.c.name)
                for row in conn.execute(query.where(t.users.c.id.in_(sorted(wanted)))):
                    users[row.id] = row.email or row.name
        return users, keys
