"""``keepstone admin list-teams|list-members|set-role|remove-member|disable-user|enable-user|
reset-password|delete-team|delete-org`` and the required ``--name`` of ``create-api-key``: the
same use-cases as the admin API, one JSON object out, a clear refusal for bad input."""

from __future__ import annotations

from typing import Any


def _team_with_member(admin: Any) -> tuple[str, str, str, str]:
    org = admin("create-org", "--name", "Acme")["id"]
    team = admin("create-team", "--org", org, "--name", "core")["id"]
    user = admin("create-user", "--email", "ann@example.com", "--password", "hunter2hunter2")["id"]
    admin("add-member", "--team", team, "--user", user, "--role", "member")
    return org, team, user, "core"


def test_teams_members_roles(admin: Any) -> None:
    org, team, user, _ = _team_with_member(admin)
    other = admin("create-org", "--name", "Other")["id"]
    admin("create-team", "--org", other, "--name", "elsewhere")
    listed = admin("list-teams", "--org", org, "--all")
    assert [(t["id"], t["name"], t["org_id"]) for t in listed["teams"]] == [(team, "core", org)]
    assert len(admin("list-teams", "--all")["teams"]) == 2
    members = admin("list-members", "--team", team)["members"]
    assert members == [
        {"user_id": user, "email": "ann@example.com", "role": "member", "projects": None}
    ]
    admin("set-role", "--team", team, "--user", user, "--role", "viewer")
    assert admin("list-members", "--team", team)["members"][0]["role"] == "viewer"
    code, _, err = admin("set-role", "--team", team, "--user", user, "--role", "boss", ok=False)
    assert code != 0 and "role" in err and "viewer" in err
    admin("remove-member", "--team", team, "--user", user)
    assert admin("list-members", "--team", team)["members"] == []
    code, _, err = admin("remove-member", "--team", team, "--user", user, ok=False)
    assert code != 0 and "not a member" in err


def test_key_name_required(admin: Any) -> None:
    _, team, user, _ = _team_with_member(admin)
    code, _, err = admin("create-api-key", "--user", user, "--team", team, ok=False)
    assert code == 2 and "--name" in err
    code, _, err = admin("create-api-key", "--user", user, "--team", team, "--name", " ", ok=False)
    assert code != 0 and "name" in err
    made = admin("create-api-key", "--user", user, "--team", team, "--name", "laptop")
    assert [k["name"] for k in admin("list-keys", "--user", user)["api_keys"]] == ["laptop"]
    assert made["key"]


def test_disable_enable_and_reset_password(admin: Any) -> None:
    _, team, user, _ = _team_with_member(admin)
    admin("create-api-key", "--user", user, "--team", team, "--name", "k")
    assert admin("disable-user", "--user", user) == {"user_id": user, "disabled": True}
    assert all(k["revoked"] for k in admin("list-keys", "--user", user)["api_keys"])
    code, _, err = admin("reset-password", "--user", user, ok=False)
    assert code != 0 and "disabled" in err
    admin("enable-user", "--user", user)
    link = admin("reset-password", "--user", user)
    assert link["path"] == f"/reset/{link['token']}" and link["expires_at"]
    code, _, err = admin("disable-user", "--user", "user_nope", ok=False)
    assert code != 0 and "user_nope" in err


def test_delete_team_then_org(admin: Any) -> None:
    org, team, _, name = _team_with_member(admin)
    code, _, err = admin("delete-org", "--id", org, ok=False)
    assert code != 0 and "delete its teams first" in err
    code, _, err = admin("delete-team", "--id", team, "--confirm", "wrong", ok=False)
    assert code != 0 and "confirm" in err and name in err
    assert admin("delete-team", "--id", team, "--confirm", name) == {"id": team, "deleted": True}
    assert admin("list-teams", "--org", org)["teams"] == []
    assert admin("delete-org", "--id", org) == {"id": org, "deleted": True}
    code, _, err = admin("delete-org", "--id", org, ok=False)
    assert code != 0 and org in err
