"""Who is asking: the identity every route and use-case receives (SPEC §7).

The HTTP auth layer builds a :class:`Principal` per request from a credential (API
key, browser session, admin token, service token) after reading memberships fresh
from the database (never cached: a removed member's very next request is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: Every API key starts with this, so a leaked key is recognisable (and secret scanners match).
API_KEY_PREFIX = "keepstone_"


class TeamRole(StrEnum):
    VIEWER = "viewer"
    CONFIG_EDITOR = "config_editor"
    MEMBER = "member"
    ADMIN = "admin"


class OrgRole(StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"


#: The org roles that act as team ``admin`` in every team of their org.
TEAM_ADMIN_ORG_ROLES: tuple[OrgRole, ...] = (OrgRole.OWNER, OrgRole.ADMIN)


def acts_as_team_admin(org_role: OrgRole | None) -> bool:
    """Whether ``org_role`` acts as team ``admin`` (unlimited) in every team of its org:
    an org owner or admin does, whatever its membership of the team."""
    return org_role in TEAM_ADMIN_ORG_ROLES


class Plan(StrEnum):
    FREE = "free"
    PRO = "pro"
    PRO_PLUS = "pro_plus"
    ENTERPRISE = "enterprise"


#: Plans that include team memory records.
MEMORY_PLANS = frozenset({Plan.PRO_PLUS, Plan.ENTERPRISE})

#: The rungs from the lowest up, in the order :class:`TeamRole` declares them.
TEAM_ROLE_RANK: dict[TeamRole, int] = {role: rank for rank, role in enumerate(TeamRole)}


class CredentialKind(StrEnum):
    API_KEY = "api_key"
    SESSION = "session"
    ADMIN_TOKEN = "admin_token"
    SERVICE_TOKEN = "service_token"
    #: ``keepstone serve --local``: single tenant, no authentication, every write allowed.
    LOCAL = "local"
    #: The operator at their own console, on their own local store (the CLI, the agent
    #: tools and ``keepstone run`` without ``--server``): the member rung in the one local
    #: team; platform authority only to import an archive into a global space.
    CONSOLE = "console"
    #: A client of a Keepstone server (``--server``): the server authenticates the token and
    #: decides every rule again, so locally nothing is refused.
    REMOTE = "remote"


#: Kinds that act for one person on a store of their own, or through a server.
_SELF_SERVED = frozenset({CredentialKind.LOCAL, CredentialKind.CONSOLE, CredentialKind.REMOTE})


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller, with its active team resolved.

    ``team_id`` is the active team (the API key's team, or the session's
    ``X-Keepstone-Team``), empty for the admin/service token. ``team_role`` is the
    effective rung in that team: an org owner/admin ranks as team ``admin``.
    ``project_ids`` is None for an unlimited member, else the projects the
    membership is limited to. ``csrf_ok`` is True for every credential but a browser
    session whose mutation lacked a valid ``X-CSRF-Token``.
    """

    kind: CredentialKind
    user_id: str = ""
    team_id: str = ""
    org_id: str = ""
    #: The org's plan, when the credential's standing was resolved with it ('' otherwise).
    plan: str = ""
    team_role: TeamRole | None = None
    org_role: OrgRole | None = None
    super_admin: bool = False
    project_ids: frozenset[str] | None = None
    csrf_ok: bool = True
    #: True for a session whose user has several teams and sent no ``X-Keepstone-Team``:
    #: ``team_id`` is then empty and a team-scoped route asks for the header.
    team_choice_needed: bool = False
    #: The API key acting ('' for any other credential): named in the history's actor.
    key_id: str = ""
    #: ``keepstone run`` folding an agent's files back: its changes are the agent run's.
    agent_run: bool = False

    @property
    def platform_authority(self) -> bool:
        """A super-admin or the admin token (or local single-tenant mode)."""
        return self.super_admin or self.kind in (CredentialKind.ADMIN_TOKEN, CredentialKind.LOCAL)

    @property
    def self_served(self) -> bool:
        """Local mode, the local console or a server's client: no team standing to read."""
        return self.kind in _SELF_SERVED

    def has_rung(self, role: TeamRole) -> bool:
        if self.kind in _SELF_SERVED:
            return True
        if self.team_role is None:
            return False
        return TEAM_ROLE_RANK[self.team_role] >= TEAM_ROLE_RANK[role]

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        if self.kind is CredentialKind.ADMIN_TOKEN:
            return "admin-token"
        if self.kind is CredentialKind.LOCAL:
            return "local"
        if self.kind is CredentialKind.CONSOLE:
            return "local-cli"
        if self.kind is CredentialKind.REMOTE:
            return "remote"
        return f"user:{self.user_id}"

    @property
    def actor_kind(self) -> str:
        """The kind of maker the history records for this caller's changes
        (:data:`keepstone.activity.ACTOR_KINDS`)."""
        if self.agent_run:
            return "agent_run"
        if self.key_id or self.kind is CredentialKind.API_KEY:
            return "api_key"
        if self.kind is CredentialKind.SERVICE_TOKEN:
            return "service"
        if self.kind is CredentialKind.ADMIN_TOKEN:
            return "platform"
        return "user"

    @property
    def change_actor(self) -> str:
        """How a document's history names this caller: :attr:`actor`, plus the API key
        when one acted (``user:<id> key:<id>``), so a key's changes can be told apart."""
        return f"{self.actor} key:{self.key_id}" if self.key_id else self.actor


@dataclass(frozen=True, slots=True)
class Standing:
    """A user's standing in one team, read in one query (never cached).

    ``team_role`` is the effective rung: an org owner/admin ranks as team ``admin``
    (unlimited) in every team of the org; None when the user acts in no such team.
    ``project_ids`` is None for an unlimited standing, else the projects the
    membership is limited to. ``plan`` is the org's plan.
    """

    org_id: str = ""
    plan: str = ""
    org_role: OrgRole | None = None
    team_role: TeamRole | None = None
    project_ids: frozenset[str] | None = None
