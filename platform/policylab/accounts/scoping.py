"""The ONE place where querysets are scoped to the teams a user may see.

Every view, API endpoint and websocket consumer passes its querysets through `scope_to_user`, so an
object of another team is simply absent (404), never "forbidden" (403): its existence is not leaked.
A request authenticated with an API token sees only the token's team (the authentication class
records it on the user object as `api_token_team_id`).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet

from policylab.accounts.models import WRITE_ROLES, Membership, Role, Team

TOKEN_TEAM_ATTR = "api_token_team_id"


def teams_of(user: Any) -> QuerySet[Team]:
    """The teams `user` belongs to (only the token's team for token-authenticated requests)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    teams = Team.objects.filter(memberships__user=user)
    token_team_id = getattr(user, TOKEN_TEAM_ATTR, None)
    if token_team_id is not None:
        teams = teams.filter(pk=token_team_id)
    return teams


def default_team(user: Any) -> Team | None:
    """The team a request acts in when it names none: the API token's team, else the user's only team."""
    teams = teams_of(user)
    if getattr(user, TOKEN_TEAM_ATTR, None) is not None:
        return teams.first()  # teams_of already kept only the token's team
    return teams.first() if teams.count() == 1 else None


def team_for(user: Any, team_id: Any) -> Team | None:
    """One of the user's teams by id (a form value: anything not an id is None, never an error)."""
    try:
        return teams_of(user).filter(pk=int(team_id)).first()
    except (TypeError, ValueError):
        return None


def scope_to_user(queryset: QuerySet, user: Any, team_path: str = "team") -> QuerySet:
    """Restrict `queryset` to rows whose `team_path` (e.g. "experiment__project__team") is one of the
    user's teams."""
    return queryset.filter(**{f"{team_path}__in": teams_of(user)})


def role_in(user: Any, team: Team) -> str | None:
    """The user's role in `team`, or None when not a member (or the token is for another team)."""
    if not teams_of(user).filter(pk=team.pk).exists():
        return None
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def require_write(user: Any, team: Team) -> None:
    """Raise PermissionDenied (403) unless `user` may change things in `team` (admin or member).

    Callers have already fetched the object through `scope_to_user`, so a non-member never gets here."""
    role = role_in(user, team)
    if role not in WRITE_ROLES:
        raise PermissionDenied(
            f"your role in team {team.slug!r} is {role or 'none'}; launching, cancelling and creating "
            f"need {Role.ADMIN.value!r} or {Role.MEMBER.value!r}"
        )


def require_admin(user: Any, team: Team) -> None:
    """Raise PermissionDenied (403) unless `user` is an admin of `team` (deleting is theirs only)."""
    role = role_in(user, team)
    if role != Role.ADMIN:
        raise PermissionDenied(f"your role in team {team.slug!r} is {role or 'none'}; deleting needs {Role.ADMIN.value!r}")


def can_write(user: Any, team: Team) -> bool:
    return role_in(user, team) in WRITE_ROLES


def team_of(obj: Model) -> Team:
    """The team that owns a Project, Experiment, Run or anything with a `run` attribute."""
    for path in ("team", "project", "experiment", "run"):
        if hasattr(obj, path):
            target = getattr(obj, path)
            return target if isinstance(target, Team) else team_of(target)
    raise TypeError(f"{type(obj).__name__} has no team")
