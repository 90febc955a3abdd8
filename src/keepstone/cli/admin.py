"""``keepstone admin ...``, ``keepstone db upgrade`` and ``keepstone db prune-history``: operator
commands on the server's database (SPEC §7.6), the same operations as the admin API (both call
:class:`keepstone.service.admin.AdminService`).

The operator at their own console holds platform authority: every command acts as
:data:`OPERATOR`. Each admin command prints one JSON object on
stdout (``{"id": ...}`` for creations), so scripts can read it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from keepstone import runtime
from keepstone.cli.common import (
    AddArgs,
    UsageError,
    add_args,
    add_database_arg,
    arg,
    cli_command,
    one_of,
    open_engine,
    print_json,
    required_verbs,
    runtime_for,
    whole,
)
from keepstone.paging import DEFAULT_PAGE, MAX_PAGE
from keepstone.principal import CredentialKind, Principal
from keepstone.text import is_whole_number

if TYPE_CHECKING:
    from keepstone.service.admin import AdminService, Page

#: Who the local operator is to the admin use-cases: whoever can open the server's
#: database already holds the platform's authority, as the admin token does.
OPERATOR = Principal(kind=CredentialKind.ADMIN_TOKEN)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    admin = subparsers.add_parser("admin", help="manage users, orgs, teams, keys and quotas")
    verbs = required_verbs(admin, "admin_command")
    for name, verb in _VERBS.items():
        parser = add_args(verbs.add_parser(name, help=verb.help), verb.args)
        add_database_arg(parser)
        parser.set_defaults(func=_run_admin)

    db = subparsers.add_parser("db", help="database maintenance")
    db_verbs = required_verbs(db, "db_command")
    p = db_verbs.add_parser("upgrade", help="apply every pending schema migration")
    add_database_arg(p)
    p.set_defaults(func=_db_upgrade)
    p = db_verbs.add_parser(
        "prune-history",
        help="drop document versions older than each team's history_days (the server's "
        "purge also does it)",
    )
    add_database_arg(p)
    p.set_defaults(func=_db_prune_history)


@cli_command  # a command line that cannot run as given (UsageError) exits 2
def _run_admin(args: argparse.Namespace) -> int:
    # The runtime reads KEEPSTONE_KEY_HASH_SECRET (else the secret kept in the database).
    with runtime_for(args) as opened:
        return print_json(_VERBS[args.admin_command].op(opened.admin, args))


def _op_create_user(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return {"id": admin.create_user(OPERATOR, a.email, a.password, a.name, a.super_admin)}


def _op_create_org(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return {"id": admin.create_org(OPERATOR, a.name, a.plan)}


def _op_create_team(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return {"id": admin.create_team(OPERATOR, a.org, a.name)}


def _op_add_member(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    if a.org:
        admin.add_org_member(OPERATOR, a.org, a.user, a.role)
        return {"org_id": a.org, "user_id": a.user, "role": a.role}
    projects = [x for x in a.projects.split(",") if x] if a.projects is not None else None
    admin.add_team_member(OPERATOR, a.team, a.user, a.role, projects)
    return {"team_id": a.team, "user_id": a.user, "role": a.role}


def _op_create_api_key(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    created = admin.create_api_key(OPERATOR, a.user, a.team, a.name)
    return {"id": created.id, "key": created.key}


def _op_set_quota(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    # Its range (keepstone.quota.MAX_QUOTA_BYTES, the admin API's bound) is the service's to refuse.
    if a.instance:
        admin.set_instance_quota(OPERATOR, a.bytes)
        return {"memory_quota_bytes": a.bytes}
    done = admin.set_org_quota(OPERATOR, a.org, a.bytes)
    return {
        **asdict(done.applied),
        "teams_updated": list(done.teams_updated),
        "teams_failed": list(done.teams_failed),
    }


def _history_arg(flag: str, raw: str) -> int | None:
    if raw == "default":
        return None
    if not is_whole_number(raw):
        raise UsageError(f"{flag} takes a whole number from 1 in digits 0-9, or 'default'")
    return int(raw)


def _op_set_history(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    given = {
        name: _history_arg(flag, raw)
        for name, flag, raw in (
            ("history_days", "--days", a.days),
            ("history_versions", "--versions", a.versions),
            ("history_quota_bytes", "--quota-bytes", a.quota_bytes),
        )
        if raw is not None
    }
    if not given:
        raise UsageError("name a limit to set: --days, --versions and/or --quota-bytes")
    done = admin.set_org_history_limits(OPERATOR, a.org, **given)
    return {
        "org_id": a.org,
        **given,
        "teams_updated": list(done.teams_updated),
        "teams_failed": list(done.teams_failed),
    }


def _op_set_plan(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return asdict(admin.update_org(OPERATOR, a.org, plan=a.plan))


def _paged(
    key: str, a: argparse.Namespace, fetch: Callable[[str | None], Page[Any]]
) -> dict[str, Any]:
    """One page (``--cursor``), or with ``--all`` every page from there on as one list."""
    page = fetch(a.cursor)
    items = [item.as_json() for item in page.items]
    while a.all and page.next_cursor is not None:
        page = fetch(page.next_cursor)
        items += [item.as_json() for item in page.items]
    return {key: items, "next_cursor": page.next_cursor}


def _op_list_orgs(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return _paged("orgs", a, lambda c: admin.list_orgs(OPERATOR, limit=a.limit, cursor=c))


def _op_list_users(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return _paged("users", a, lambda c: admin.list_users(OPERATOR, limit=a.limit, cursor=c))


def _op_list_keys(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    def fetch(cursor: str | None) -> Page[Any]:
        return admin.list_api_keys(
            OPERATOR, limit=a.limit, cursor=cursor, user_id=a.user, team_id=a.team
        )

    return _paged("api_keys", a, fetch)


def _op_list_teams(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    def fetch(cursor: str | None) -> Page[Any]:
        return admin.list_teams(OPERATOR, limit=a.limit, cursor=cursor, org_id=a.org)

    return _paged("teams", a, fetch)


def _op_list_members(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    return {"members": [m.as_json() for m in admin.team_members(OPERATOR, a.team)]}


def _op_set_role(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    admin.set_team_role(OPERATOR, a.team, a.user, a.role)
    return {"team_id": a.team, "user_id": a.user, "role": a.role}


def _op_remove_member(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    admin.remove_team_member(OPERATOR, a.team, a.user)
    return {"team_id": a.team, "user_id": a.user, "removed": True}


def _op_reset_password(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    link = admin.reset_password(OPERATOR, a.user)
    return {
        "user_id": a.user,
        "token": link.token,
        "path": f"/reset/{link.token}",
        "expires_at": link.expires_at.isoformat(),
    }


def _op_delete_team(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
    admin.delete_team(OPERATOR, a.id, a.confirm)
    return {"id": a.id, "deleted": True}


_Op = Callable[["AdminService", argparse.Namespace], dict[str, Any]]


def _on_one(flag: str, key: str, act: Callable[[AdminService, str], None], **answer: bool) -> _Op:
    """The verb that does ``act`` to what ``--<flag>`` names and answers with that id (as
    ``key``) and ``answer``."""

    def op(admin: AdminService, a: argparse.Namespace) -> dict[str, Any]:
        named: str = getattr(a, flag)
        act(admin, named)
        return {key: named, **answer}

    return op


_disable_user = _on_one(
    "user", "user_id", lambda s, user: s.disable_user(OPERATOR, user), disabled=True
)
_enable_user = _on_one(
    "user", "user_id", lambda s, user: s.enable_user(OPERATOR, user), disabled=False
)
_delete_org = _on_one("id", "id", lambda s, org: s.delete_org(OPERATOR, org), deleted=True)
_revoke_key = _on_one("id", "id", lambda s, key: s.revoke_api_key(OPERATOR, key), revoked=True)


@dataclass(frozen=True)
class _Verb:
    """An admin verb: its help, what it does, and its arguments (``--database`` is every
    verb's)."""

    help: str
    op: _Op
    args: tuple[AddArgs, ...]


_PLANS = "free|pro|pro_plus|enterprise"
_USER = arg("--user", required=True, help="user id")
_TEAM = arg("--team", required=True, help="team id")


def _listing(what: str, op: _Op, *filters: AddArgs) -> _Verb:
    """A verb that lists ``what`` a page at a time."""
    return _Verb(
        f"list the {what}, a page at a time (never a secret)",
        op,
        (
            arg("--limit", type=whole, default=DEFAULT_PAGE, help=f"1-{MAX_PAGE} a page"),
            arg("--cursor", default=None, help="the next_cursor of the previous page"),
            arg("--all", action="store_true", help="every page, as one list"),
            *filters,
        ),
    )


def _history_limit(flag: str, what: str) -> AddArgs:
    return arg(flag, default=None, metavar="N|default", help=f"{what}; 'default' resets")


#: ``keepstone admin``'s verbs, in the order ``--help`` lists them.
_VERBS: dict[str, _Verb] = {
    "create-user": _Verb(
        "create a user",
        _op_create_user,
        (
            arg("--email", required=True),
            arg("--password", default=None, help="at least 8 characters (omit: no sign-in)"),
            arg("--name", default=""),
            arg("--super-admin", action="store_true"),
        ),
    ),
    "create-org": _Verb(
        "create an org",
        _op_create_org,
        (arg("--name", required=True), arg("--plan", default="free", help=_PLANS)),
    ),
    "create-team": _Verb(
        "create a team in an org",
        _op_create_team,
        (arg("--org", required=True, help="org id"), arg("--name", required=True)),
    ),
    "add-member": _Verb(
        "add a user to a team (or, with --org, an org)",
        _op_add_member,
        (
            one_of(arg("--team", help="team id"), arg("--org", help="org id")),
            _USER,
            arg(
                "--role",
                required=True,
                help="team: viewer|config_editor|member|admin; org: owner|admin|member",
            ),
            arg("--projects", default=None, help="comma-separated project ids (team only)"),
        ),
    ),
    "create-api-key": _Verb(
        "mint an API key (shown once)",
        _op_create_api_key,
        (
            _USER,
            arg("--team", required=True, help="team id the key acts in"),
            arg("--name", required=True, help="what the key is for (shown in lists and history)"),
        ),
    ),
    "set-quota": _Verb(
        "set an org's memory quota, or the instance's",
        _op_set_quota,
        (
            one_of(
                arg("--org", help="org id"),
                arg("--instance", action="store_true", help="the global-space quota"),
            ),
            arg("--bytes", type=whole, required=True, help="quota in bytes"),
        ),
    ),
    "set-history": _Verb(
        "set how much document history an org's teams keep",
        _op_set_history,
        (
            arg("--org", required=True, help="org id"),
            _history_limit("--days", "days a replaced version is kept (default 30)"),
            _history_limit("--versions", "versions kept per document (default 50)"),
            _history_limit(
                "--quota-bytes", "bytes of history a team keeps (default: the team's quota)"
            ),
        ),
    ),
    "set-plan": _Verb(
        "set an org's plan",
        _op_set_plan,
        (arg("--org", required=True), arg("--plan", required=True, help=_PLANS)),
    ),
    "list-orgs": _listing("orgs", _op_list_orgs),
    "list-users": _listing("users", _op_list_users),
    "list-keys": _listing(
        "API keys",
        _op_list_keys,
        arg("--user", default=None, help="only this user's keys (user id)"),
        arg("--team", default=None, help="only this team's keys (team id)"),
    ),
    "list-teams": _listing(
        "teams", _op_list_teams, arg("--org", default=None, help="only this org's teams (org id)")
    ),
    "list-members": _Verb(
        "list a team's members (email, role, projects)",
        _op_list_members,
        (_TEAM,),
    ),
    "set-role": _Verb(
        "change a team member's role (their project limit stays)",
        _op_set_role,
        (_TEAM, _USER, arg("--role", required=True, help="viewer|config_editor|member|admin")),
    ),
    "remove-member": _Verb(
        "remove a user from a team (their next request there is refused)",
        _op_remove_member,
        (_TEAM, _USER),
    ),
    "disable-user": _Verb(
        "disable a user: no sign-in, sessions ended, keys revoked",
        _disable_user,
        (_USER,),
    ),
    "enable-user": _Verb("let a disabled user sign in again", _enable_user, (_USER,)),
    "reset-password": _Verb(
        "make a one-time password-reset link (24 hours, single use)",
        _op_reset_password,
        (_USER,),
    ),
    "delete-team": _Verb(
        "delete a team with its spaces, records, keys and memberships",
        _op_delete_team,
        (
            arg("--id", required=True, help="team id"),
            arg("--confirm", required=True, help="the team's name, typed exactly"),
        ),
    ),
    "delete-org": _Verb(
        "delete an org that has no team left",
        _delete_org,
        (arg("--id", required=True, help="org id"),),
    ),
    "revoke-key": _Verb(
        "revoke an API key (its next request is refused)",
        _revoke_key,
        (arg("--id", required=True, help="the key's id (keepstone admin list-keys)"),),
    ),
}


def _db_prune_history(args: argparse.Namespace) -> int:
    with runtime_for(args) as opened:
        return print_json({"pruned_versions": opened.admin.prune_history()})


def _db_upgrade(args: argparse.Namespace) -> int:
    with open_engine(args, upgrade=False) as engine:
        applied = runtime.migrate_database(engine)
    return print_json({"applied": [f"{m.component}:{m.version}" for m in applied]})
