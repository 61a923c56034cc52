"""Sign-in pages and API token management for people (the API has /api/tokens/ for scripts)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from policylab.accounts import team_secrets
from policylab.accounts.models import ApiToken, Role
from policylab.accounts.scoping import role_in, team_for, teams_of
from policylab.accounts.services import create_api_token, revoke_api_token


def tokens_of(user):
    return ApiToken.objects.filter(user=user, team__in=teams_of(user)).select_related("team")


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    new_secret = None
    if request.method == "POST":
        team = team_for(request.user, request.POST.get("team"))
        name = request.POST.get("name", "").strip()
        if team is None or not name:
            messages.error(request, "A token needs a name and one of your teams.")
        else:
            new_secret = create_api_token(request.user, team, name).secret
    return render(
        request,
        "accounts/tokens.html",
        {"tokens": tokens_of(request.user), "teams": teams_of(request.user), "new_secret": new_secret},
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(tokens_of(request.user), pk=pk)
    revoke_api_token(token)
    messages.success(request, f"Token {token.name!r} revoked.")
    return redirect("accounts:tokens")


@login_required
def secrets(request: HttpRequest) -> HttpResponse:
    """Each of the user's teams with its secrets' names (never a value); admins set, replace and delete them."""
    if request.method == "POST":
        team = team_for(request.user, request.POST.get("team"))
        if team is None:
            raise Http404("no such team of yours")
        try:
            _, created = team_secrets.set_secret(team=team, name=request.POST.get("name", "").strip(),
                                                 value=request.POST.get("value", ""), user=request.user)
        except team_secrets.SecretError as error:
            messages.error(request, f"{error.field}: {error}")
        else:
            messages.success(request, f"Secret {request.POST['name'].strip()!r} {'stored' if created else 'replaced'} "
                                      f"in {team.name}.")
        return redirect("accounts:secrets")
    teams = [(team, role_in(request.user, team) == Role.ADMIN, team_secrets.secrets_of(team))
             for team in teams_of(request.user)]
    return render(request, "accounts/secrets.html", {"teams": teams})


@login_required
@require_POST
def secret_delete(request: HttpRequest, team_id: int, name: str) -> HttpResponse:
    team = team_for(request.user, team_id)
    if team is None:
        raise Http404("no such team of yours")
    if not team_secrets.delete_secret(team=team, name=name, user=request.user):
        raise Http404("no such secret")
    messages.success(request, f"Secret {name!r} deleted from {team.name}.")
    return redirect("accounts:secrets")
