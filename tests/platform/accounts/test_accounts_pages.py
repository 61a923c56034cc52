"""Sign-in/out and the API token page; the API docs page is served without a CDN."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from policylab.accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def test_sign_in_with_a_wrong_password_fails_and_sign_out_works(alice):
    client = Client()
    page = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert page.status_code == 200 and "did not match" in page.content.decode()
    assert client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123456"}).status_code == 302
    assert client.get("/").status_code == 200
    client.post("/accounts/logout/")
    assert client.get("/").status_code == 302


def test_token_page_shows_the_secret_once_and_revokes(alice, team_a, bob):
    client = Client()
    client.force_login(alice)
    html = client.post("/accounts/tokens/", {"name": "laptop", "team": team_a.pk}).content.decode()
    secret = re.search(r'<code class="secret">(plk_[^<]+)</code>', html).group(1)
    token = ApiToken.objects.get(name="laptop")
    assert secret not in client.get("/accounts/tokens/").content.decode()
    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/runs/").status_code == 200
    client.post(f"/accounts/tokens/{token.pk}/revoke/")
    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/runs/").status_code == 401
    # a team you are not in cannot own your token
    client.post("/accounts/tokens/", {"name": "sneaky", "team": bob.memberships.get().team_id})
    assert not ApiToken.objects.filter(name="sneaky").exists()


def test_api_docs_page_uses_local_assets(alice):
    client = Client()
    client.force_login(alice)
    html = client.get("/api/docs/").content.decode()
    assert "/static/drf_spectacular_sidecar/" in html and "cdn." not in html


def test_static_files_are_served_with_debug_off(settings):
    settings.DEBUG = False
    for path in ("/static/css/policylab.css", "/static/js/config_editor.js"):
        response = Client().get(path)
        assert response.status_code == 200, path
        assert b"".join(response.streaming_content)
