"""The access model: who may do what, decided here and nowhere else (SPEC §4-§7).

A face turns the credential of a request into a :class:`~keepstone.principal.Principal`
once, with :meth:`Credentials.authenticate` (an API key's standing in its team is read
in that same query). Every use-case then takes the principal as an argument and asks
this module for its decision; docs/architecture.md ("The access model") tables each
rule with the function here that decides it. Membership and standing are never cached:
a member removed a moment ago is refused on their very next request.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from keepstone.documents import PlatformGrant
from keepstone.errors import (
    CsrfRequired,
    Forbidden,
    InvalidRequest,
    KeepstoneError,
    MemberRoleRequired,
    NotFound,
    PlatformAuthorityRequired,
    TeamNotFound,
    Unauthenticated,
)
from keepstone.principal import (
    API_KEY_PREFIX,
    MEMORY_PLANS,
    CredentialKind,
    Plan,
    Principal,
    Standing,
    TeamRole,
    acts_as_team_admin,
)
from keepstone.records.models import is_clean_id
from keepstone.spaces import SpaceRef, Visibility, parse_visibility

if TYPE_CHECKING:
    from keepstone.identity.service import IdentityService

#: The implicit team of ``keepstone serve --local`` and of the local CLI.
LOCAL_TEAM = "local"

#: Local single-tenant mode: one implicit team and user, every write allowed.
LOCAL_PRINCIPAL = Principal(
    kind=CredentialKind.LOCAL, user_id="local", team_id=LOCAL_TEAM, team_role=TeamRole.ADMIN
)


def console_principal(user: str) -> Principal:
    """The operator at their own console, on the local store, as login ``user``."""
    return Principal(kind=CredentialKind.CONSOLE, user_id=user, team_id=LOCAL_TEAM)


def remote_principal(user: str = "") -> Principal:
    """A client of a Keepstone server: the server stamps the team and user from the token."""
    return Principal(kind=CredentialKind.REMOTE, user_id=user)


# --- Credentials -----------------------------------------------------------------------------


class Credentials:
    """Turns a request's credential into a :class:`Principal`.

    Order: local mode → ``Authorization: Bearer`` (admin token, service token, API key)
    → the session cookie. A bearer value that is present but wrong is a 401 even when a
    cookie is also sent.
    """

    def __init__(
        self,
        identity: IdentityService | None,
        *,
        admin_token: str | None = None,
        service_token: str | None = None,
    ) -> None:
        self._identity = identity
        self._admin_token = admin_token
        self._service_token = service_token

    def authenticate(
        self,
        *,
        authorization: str | None,
        session: str | None,
        csrf_token: str | None,
        mutating: bool,
        team_header: str | None,
    ) -> Principal:
        identity = self._identity
        if identity is None:
            return LOCAL_PRINCIPAL
        self.require_presented(authorization=authorization, session=session)
        if authorization is not None:
            token = authorization.partition(" ")[2].strip()
            if _same(self._admin_token, token):
                return Principal(kind=CredentialKind.ADMIN_TOKEN)
            if _same(self._service_token, token):
                return Principal(kind=CredentialKind.SERVICE_TOKEN)
            if token.startswith(API_KEY_PREFIX):
                found = identity.principal_for_api_key(token)
                if found is not None:
                    return found
            raise Unauthenticated("the bearer token is not a valid or live credential")
        found = identity.principal_for_session(
            session or "", csrf_token=csrf_token, mutating=mutating, team_header=team_header
        )
        if found is not None:
            return found
        raise Unauthenticated("the session has expired or was signed out; sign in again")

    def resolves_without_io(self, *, authorization: str | None) -> bool:
        """Whether :meth:`authenticate` answers this credential with no database read:
        local mode, the admin token and the service token (an API key or a session is
        read from the database)."""
        if self._identity is None:
            return True
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        return _same(self._admin_token, token) or _same(self._service_token, token)

    def require_presented(self, *, authorization: str | None, session: str | None) -> None:
        """``401 unauthenticated`` when the request presents no credential, or a malformed
        ``Authorization`` header: what :meth:`authenticate` refuses before any I/O."""
        if self._identity is None:
            return
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("send the credential as 'Authorization: Bearer <token>'")
            return
        if not session:
            raise Unauthenticated(
                "sign in: send 'Authorization: Bearer <API key>' or a keepstone_session cookie"
            )

    # --- Signing in and out: browser sessions (SPEC §7.2) ---------------------------------
    # The login route throttles failed sign-ins around sign_in (brute-force protection is
    # the HTTP face's concern: keepstone.api.throttle).

    def sign_in(self, email: str, password: str) -> SignedIn:
        """Check a password and open a browser session.

        ``401 unauthenticated`` when the email or the password is wrong (the same answer
        for both); ``404 not_found`` in local mode, which has no users.
        """
        if self._identity is None:
            raise NotFound("local mode has no identity store")
        session = self._identity.login(email, password)
        return SignedIn(
            token=session.token,
            csrf_token=session.csrf_token,
            user=SessionUser(**session.user),
            teams=tuple(SessionTeam(**team) for team in session.teams),
        )

    def teams_of(self, who: Principal) -> tuple[SessionTeam, ...]:
        """The teams a signed-in user acts in now (as :meth:`sign_in` lists them), for a
        face that lets them pick the active one; none for a credential of no user."""
        require_user(who)
        if self._identity is None or not who.user_id:
            return ()
        return tuple(SessionTeam(**team) for team in self._identity.user_teams(who.user_id))

    def sign_out(self, who: Principal, session_token: str | None) -> None:
        """End the session ``session_token`` when ``who`` is that browser session.

        A change, so a session must send its CSRF token; any other credential (an API
        key, the admin token) has no session to end and signs out as a no-op.
        """
        require_user(who)
        require_csrf(who)
        if who.kind is CredentialKind.SESSION and session_token and self._identity is not None:
            self._identity.logout(session_token)


# --- Browser sessions (SPEC §7.2): what signing in answers -----------------------------------


@dataclass(frozen=True, slots=True)
class SessionUser:
    id: str
    email: str
    name: str
    super_admin: bool


@dataclass(frozen=True, slots=True)
class SessionTeam:
    """A team the user acts in; ``role`` is ``admin`` in every team of an org it owns/admins."""

    id: str
    name: str
    org_id: str
    role: str


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A new session: the cookie value (``token``) and the CSRF token are shown once."""

    token: str = field(repr=False)
    csrf_token: str = field(repr=False)
    user: SessionUser
    teams: tuple[SessionTeam, ...]


def _same(expected: str | None, given: str) -> bool:
    return bool(expected) and hmac.compare_digest(
        str(expected).encode("utf-8"), given.encode("utf-8")
    )


# --- Rules every face shares ------------------------------------------------------------------


def require_user(who: Principal) -> Principal:
    """A signed-in user credential or the admin token: the service token only saves records."""
    if who.kind is CredentialKind.SERVICE_TOKEN:
        raise Forbidden("the service token may only save team memory records")
    return who


def require_csrf(who: Principal) -> None:
    if not who.csrf_ok:
        raise CsrfRequired(
            "a browser-session request that changes data must send the X-CSRF-Token header "
            "given at sign-in"
        )


def require_platform_authority(who: Principal, *, mutating: bool) -> None:
    """A super-admin or the admin token (the admin API); CSRF for a session's change."""
    require_user(who)
    if not who.platform_authority:
        raise Forbidden("the admin API is for super-admins and the admin token")
    if mutating:
        require_csrf(who)


# --- Knowledge spaces (SPEC §2, §5) ------------------------------------------------------------


def space_ref(
    who: Principal,
    name: str,
    visibility: str | Visibility = Visibility.PROJECT,
    *,
    project: str | None = None,
    bot: str | None = None,
    user: str | None = None,
) -> SpaceRef:
    """The space a caller names, stamped with the caller's team (and user).

    The tenant never comes from the request: it is the principal's active team, and
    the user is the principal's. Only a self-served principal (local mode, the local
    console, a server's client) may name another user (the CLI's ``--user``).
    """
    vis = visibility if isinstance(visibility, Visibility) else parse_visibility(visibility)
    if vis is Visibility.GLOBAL:
        return SpaceRef.build(Visibility.GLOBAL, name)
    if who.self_served:
        return SpaceRef.build(
            vis, name, tenant=who.team_id, project=project, bot=bot, user=user or who.user_id
        )
    if who.team_choice_needed:
        raise InvalidRequest(
            "you belong to several teams: send the X-Keepstone-Team header naming the active one",
            field="X-Keepstone-Team",
        )
    if not who.team_id:
        raise Forbidden(
            "this credential acts in no team, so it has no team spaces; use a team member's "
            "API key (or visibility=global)"
        )
    if who.team_role is None:
        raise TeamNotFound("this credential's user is no longer a member of its team")
    return SpaceRef.build(vis, name, tenant=who.team_id, project=project, bot=bot, user=who.user_id)


def reading_team(who: Principal) -> str:
    """The team whose spaces a search over every space the caller may read considers
    (``scope=readable``); '' for a credential of no team, which reads global spaces only.
    Refused as every read of a team space is: the service token, a session in several
    teams without ``X-Keepstone-Team``, a member no longer in the team."""
    require_user(who)
    if not who.self_served and (who.team_id or who.team_choice_needed):
        space_ref(who, "readable", Visibility.ORG)  # refuses as any team space read would
    return who.team_id


def readable_spaces(who: Principal, candidates: Iterable[SpaceRef]) -> list[SpaceRef]:
    """Those of ``candidates`` that ``who`` may read, in their order.

    One rule, :func:`space_ref`'s: a candidate is readable when the space the caller would
    get by naming its visibility, name, project and bot is that very candidate — so only
    the caller's own team (the tenant is stamped from the credential), only the caller's
    own ``user`` spaces (the user is stamped too, for a self-served console as well), and
    every global space.
    """
    readable: list[SpaceRef] = []
    for ref in candidates:
        try:
            named = space_ref(
                who, ref.name, ref.visibility, project=ref.project or None, bot=ref.bot or None
            )
        except KeepstoneError:
            continue
        if named == ref:
            readable.append(ref)
    return readable


def authorize_space_mutation(
    who: Principal, ref: SpaceRef, *, importing: bool = False
) -> PlatformGrant | None:
    """CSRF for sessions, then platform authority for global or the member rung.

    Returns the :class:`PlatformGrant` a global mutation carries to the store (the
    caller's active team is debited for its bytes while it is a member), else None.
    The local console has platform authority for one act only: importing an archive
    into a global space of its own store. A server's client claims it, and the server
    decides.
    """
    require_user(who)
    require_csrf(who)
    if ref.is_global:
        console_import = importing and who.kind is CredentialKind.CONSOLE
        remote = who.kind is CredentialKind.REMOTE
        if not (who.platform_authority or console_import or remote):
            raise PlatformAuthorityRequired(
                "changing a global space needs platform authority (a super-admin or the "
                "admin token)"
            )
        team = who.team_id if who.team_role is not None else None
        return PlatformGrant(actor=who.actor, attribution_team=team or None)
    if not who.has_rung(TeamRole.MEMBER):
        raise MemberRoleRequired(
            f"changing documents needs the member role in the team; yours is "
            f"{who.team_role.value if who.team_role else 'none'}"
        )
    return None


# --- Team memory records (SPEC §6) --------------------------------------------------------------


class Action(StrEnum):
    """What the caller wants to do with a team's records; decides the credential check."""

    READ = "read"  # search, list, read settings: any team member
    MANAGE = "manage"  # delete a record, change the setting: org owner/admin, browser
    SAVE = "save"  # save a record: the service token only


#: What a token credential (the service or the admin token: no one's membership) may not do
#: with a team's records, and who may: the end of its refusal's message.
_TOKEN_REFUSALS = {
    Action.READ: "read team memory records; use a team member's API key or browser session",
    Action.MANAGE: "delete a record or change the memory setting; a workspace owner or admin "
    "does it signed in, in a browser",
    Action.SAVE: "save team memory records; the host application's server saves them, with "
    "the service token",
}


@dataclass(frozen=True, slots=True)
class TeamAccess:
    """A caller's standing in one team, as the records use-cases need it.

    ``project_ids`` is None when the caller sees every record of the team (an
    unlimited member, an org owner or admin, the service token), else the projects
    whose repositories' records it may see. ``plan`` is the org's plan.
    """

    team_id: str
    org_id: str
    plan: str
    project_ids: frozenset[str] | None
    can_manage: bool
    #: The caller can change the org's plan itself (a super-admin): refusals name how.
    operator: bool = False

    @property
    def plan_allows(self) -> bool:
        return self.plan in MEMORY_PLANS

    @property
    def visibility_fingerprint(self) -> str:
        """Stable text naming what this caller can see (binds list page tokens)."""
        if self.project_ids is None:
            return "all"
        return "p:" + ",".join(sorted(self.project_ids))


def _team_not_found(team_id: str) -> TeamNotFound:
    return TeamNotFound(
        f"team {team_id!r} was not found, or you are not a member of it; "
        "ask a team member to add you"
    )


class Access:
    """The decisions that need the identity store: records access, org membership."""

    def __init__(self, identity: IdentityService | None) -> None:
        self._identity = identity

    def _standing(self, user_id: str, team_id: str) -> Standing | None:
        if self._identity is None or not is_clean_id(team_id):
            return None
        return self._identity.standing(user_id, team_id)

    def team_access(self, who: Principal, team_id: str, action: Action) -> TeamAccess:
        """The caller's access to ``team_id``'s records for ``action``, or the first refusal.

        In the contract's order: no such team / not a member / an API key of another
        team → ``404 team_not_found``; then the credential or role → ``403 forbidden``
        or ``403 csrf_required``. A principal whose credential resolution already read
        its standing in this team (an API key in its own team, a session with
        ``X-Keepstone-Team``) costs no further query.
        """
        if who.kind is CredentialKind.LOCAL:
            # Single-tenant mode: one implicit team, everything allowed, no plan gate.
            if team_id != LOCAL_TEAM:
                raise _team_not_found(team_id)
            return TeamAccess(team_id, "", Plan.ENTERPRISE.value, None, True)
        if who.kind in (CredentialKind.SERVICE_TOKEN, CredentialKind.ADMIN_TOKEN):
            standing = self._standing("", team_id)
            if standing is None:
                raise _team_not_found(team_id)
            # Token credentials belong to no team: they pass the team check only for
            # a team that exists, then meet the credential check.
            if action is Action.SAVE and who.kind is CredentialKind.SERVICE_TOKEN:
                return TeamAccess(team_id, standing.org_id, standing.plan, None, False)
            token = "service token" if who.kind is CredentialKind.SERVICE_TOKEN else "admin token"
            raise Forbidden(f"the {token} cannot {_TOKEN_REFUSALS[action]}")
        if who.kind is CredentialKind.API_KEY and who.team_id != team_id:
            raise _team_not_found(team_id)
        if who.plan and who.team_id == team_id:
            standing = Standing(who.org_id, who.plan, who.org_role, who.team_role, who.project_ids)
        else:
            standing = self._standing(who.user_id, team_id)
        if standing is None or standing.team_role is None:
            raise _team_not_found(team_id)
        return _decide(who, team_id, standing, action)

    def team_for_save(self, team_id: str) -> TeamAccess:
        """The access the server's own code has when it saves for ``team_id``."""
        standing = self._standing("", team_id)
        return self.save_access(
            team_id, None if standing is None else (standing.org_id, standing.plan), server=True
        )

    def save_checked_on_write(self, who: Principal | None, team_id: str) -> bool:
        """Whether a save by ``who`` (None: the server's own code) may leave its team
        check to the save's write transaction (:meth:`save_access` over what it reads).

        Only the service token and the server may: their one check is that the team
        exists (then its plan), which the write reads beside the memory setting at no
        extra transaction. Every other credential is refused by :meth:`team_access`
        first (a user credential never saves), and a team id no team can have never
        reaches the database."""
        if self._identity is None or not is_clean_id(team_id):
            return False
        return who is None or who.kind is CredentialKind.SERVICE_TOKEN

    @staticmethod
    def save_access(team_id: str, found: tuple[str, str] | None, *, server: bool) -> TeamAccess:
        """The access of a save for ``team_id`` by the service token (or, ``server``, the
        server's own code) from the team's ``(org, plan)``; ``404 team_not_found``
        when ``found`` is None (no such team)."""
        if found is None:
            if server:
                raise TeamNotFound(f"team {team_id!r} was not found; check the team id")
            raise _team_not_found(team_id)
        return TeamAccess(team_id, found[0], found[1], None, False)

    def may_read_org(self, who: Principal, org_id: str) -> bool:
        """Org-wide figures: platform authority, org members of any role and members of
        any of its teams; an API key only for the org of its own team."""
        if who.platform_authority:
            return True
        if who.kind is CredentialKind.API_KEY:
            return who.team_role is not None and who.org_id == org_id
        if self._identity is None or not who.user_id:
            return False
        return self._identity.is_org_member(who.user_id, org_id)


def _decide(who: Principal, team_id: str, standing: Standing, action: Action) -> TeamAccess:
    org_admin = acts_as_team_admin(standing.org_role)
    browser = who.kind is CredentialKind.SESSION
    if action is Action.SAVE:
        raise Forbidden(
            "team memory records are saved only by the host application's server "
            "(the service token); no user credential can save one"
        )
    if action is Action.MANAGE:
        if not browser:
            raise Forbidden(
                "an API key cannot delete a record or change the memory setting; "
                "a workspace owner or admin does it signed in, in a browser"
            )
        if not org_admin:
            raise Forbidden(
                "only a workspace owner or admin can delete a record or change the "
                "memory setting; ask one of them"
            )
        require_csrf(who)
    return TeamAccess(
        team_id,
        standing.org_id,
        standing.plan,
        standing.project_ids,
        org_admin and browser,
        operator=who.platform_authority,
    )
