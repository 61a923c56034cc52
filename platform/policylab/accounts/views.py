"""Sign-in pages and API token management for people (the API has /api/tokens/ for scripts)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from policylab.accounts.models import ApiToken
from policylab.accounts.scoping import team_for, teams_of
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
