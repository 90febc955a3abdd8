"""``cairn admin ...`` and ``cairn db upgrade``: operator commands on the server's database
(SPEC §7.6), the same operations as the admin API (both call the identity service).

Each admin command prints one JSON object on stdout (``{"id": ...}`` for creations),
so scripts can read it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from sqlalchemy.engine import Engine

from cairn.cli.common import add_database_arg, open_engine, print_json
from cairn.identity.keys import load_key_hasher
from cairn.identity.service import IdentityService
from cairn.quota import Limits
from cairn.schema import upgrade_all


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    admin = subparsers.add_parser("admin", help="manage users, orgs, teams, keys and quotas")
    verbs = admin.add_subparsers(dest="admin_command", metavar="VERB")
    verbs.required = True

    p = verbs.add_parser("create-user", help="create a user")
    p.add_argument("--email", required=True)
    p.add_argument("--password", default=None, help="at least 8 characters (omit: no sign-in)")
    p.add_argument("--name", default="")
    p.add_argument("--super-admin", action="store_true")
    p.set_defaults(func=_run_admin)

    p = verbs.add_parser("create-org", help="create an org")
    p.add_argument("--name", required=True)
    p.add_argument("--plan", default="free", help="free|pro|pro_plus|enterprise")
    p.set_defaults(func=_run_admin)

    p = verbs.add_parser("create-team", help="create a team in an org")
    p.add_argument("--org", required=True, help="org id")
    p.add_argument("--name", required=True)
    p.set_defaults(func=_run_admin)

    p = verbs.add_parser("add-member", help="add a user to a team (or, with --org, an org)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--team", help="team id")
    where.add_argument("--org", help="org id")
    p.add_argument("--user", required=True, help="user id")
    p.add_argument(
        "--role",
        required=True,
        help="team: viewer|config_editor|member|admin; org: owner|admin|member",
    )
    p.add_argument("--projects", default=None, help="comma-separated project ids (team only)")
    p.set_defaults(func=_run_admin)

    p = verbs.add_parser("create-api-key", help="mint an API key (shown once)")
    p.add_argument("--user", required=True, help="user id")
    p.add_argument("--team", required=True, help="team id the key acts in")
    p.add_argument("--name", default="")
    p.set_defaults(func=_run_admin)

    p = verbs.add_parser("set-quota", help="set an org's memory quota, or the instance's")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--org", help="org id")
    which.add_argument("--instance", action="store_true", help="the global-space quota")
    p.add_argument("--bytes", type=int, required=True, help="quota in bytes")
    p.set_defaults(func=_run_admin)

    p = verbs.add_parser("set-plan", help="set an org's plan")
    p.add_argument("--org", required=True)
    p.add_argument("--plan", required=True, help="free|pro|pro_plus|enterprise")
    p.set_defaults(func=_run_admin)

    for parser in verbs.choices.values():
        add_database_arg(parser)

    db = subparsers.add_parser("db", help="database maintenance")
    db_verbs = db.add_subparsers(dest="db_command", metavar="VERB")
    db_verbs.required = True
    p = db_verbs.add_parser("upgrade", help="apply every pending schema migration")
    add_database_arg(p)
    p.set_defaults(func=_db_upgrade)


def _identity(engine: Engine) -> IdentityService:
    secret = os.environ.get("CAIRN_KEY_HASH_SECRET") or None
    return IdentityService(engine, load_key_hasher(engine, secret))


def _run_admin(args: argparse.Namespace) -> int:
    with open_engine(args) as engine:
        return print_json(_OPS[args.admin_command](_identity(engine), engine, args))


def _op_create_user(i: IdentityService, _e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    return {"id": i.create_user(a.email, a.password, a.name, a.super_admin)}


def _op_create_org(i: IdentityService, _e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    return {"id": i.create_org(a.name, a.plan)}


def _op_create_team(i: IdentityService, _e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    return {"id": i.create_team(a.org, a.name)}


def _op_add_member(i: IdentityService, _e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    if a.org:
        i.add_org_member(a.org, a.user, a.role)
        return {"org_id": a.org, "user_id": a.user, "role": a.role}
    projects = [x for x in a.projects.split(",") if x] if a.projects is not None else None
    i.add_team_member(a.team, a.user, a.role, projects)
    return {"team_id": a.team, "user_id": a.user, "role": a.role}


def _op_create_api_key(i: IdentityService, _e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    key_id, key = i.create_api_key(a.user, a.team, a.name)
    return {"id": key_id, "key": key}


def _store(engine: Engine) -> Any:
    from cairn.api.app import open_sql_store

    return open_sql_store(engine, Limits())


def _op_set_quota(i: IdentityService, e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    from cairn.identity.quotas import set_instance_quota, set_org_quota

    if a.bytes < 0:
        from cairn.errors import InvalidRequest

        raise InvalidRequest("--bytes must be a whole number >= 0")
    if a.instance:
        set_instance_quota(_store(e), a.bytes)
        return {"memory_quota_bytes": a.bytes}
    return set_org_quota(i, _store(e), a.org, a.bytes)


def _op_set_plan(i: IdentityService, _e: Engine, a: argparse.Namespace) -> dict[str, Any]:
    return i.update_org(a.org, plan=a.plan)


_OPS = {
    "create-user": _op_create_user,
    "create-org": _op_create_org,
    "create-team": _op_create_team,
    "add-member": _op_add_member,
    "create-api-key": _op_create_api_key,
    "set-quota": _op_set_quota,
    "set-plan": _op_set_plan,
}


def _db_upgrade(args: argparse.Namespace) -> int:
    with open_engine(args, upgrade=False) as engine:
        applied = upgrade_all(engine)
    return print_json({"applied": [f"{m.component}:{m.version}" for m in applied]})
