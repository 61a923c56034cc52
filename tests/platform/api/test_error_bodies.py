"""Every API error answers the API's JSON error shape (413, 404, 500 included); the HTML side answers
plain pages that show no traceback and no URL map."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from policylab.accounts.services import create_api_token
from policylab.api import views as api_views
from policylab.experiments import selectors

pytestmark = pytest.mark.django_db

LIMIT = 2_621_440  # settings.DATA_UPLOAD_MAX_MEMORY_SIZE
SECRET_DETAIL = "boom-detail-/srv/policylab/secret.py"


def assert_error_shape(response, status: int) -> list[dict[str, str]]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["warnings"] == [] and body["errors"], body
    assert all(set(e) >= {"field", "message"} for e in body["errors"])
    return body["errors"]


@pytest.fixture
def api(alice, team_a) -> APIClient:
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {create_api_token(alice, team_a, 'errors').secret}")
    return client


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("url", ["/api/nope/", "/api/runs/abc/", "/api/runs/123456/", "/api/runs/1/metrics/x/"])
def test_api_404s_are_json_in_and_out_of_debug(api, settings, debug, url):
    settings.DEBUG = debug
    response = api.get(url)
    assert_error_shape(response, 404)
    assert b"URLconf" not in response.content


@pytest.mark.parametrize("debug", [False, True])
def test_an_api_500_is_json_without_a_traceback(api, settings, monkeypatch, debug):
    settings.DEBUG = debug

    def broken(self, request):
        raise RuntimeError(SECRET_DETAIL)

    monkeypatch.setattr(api_views.ConfigSchema, "get", broken)
    response = api.get("/api/config-schema/")
    (error,) = assert_error_shape(response, 500)
    assert "internal server error" in error["message"]
    assert SECRET_DETAIL.encode() not in response.content and b"Traceback" not in response.content


def test_unauthenticated_api_calls_keep_the_shape_and_the_challenge():
    response = Client().get("/api/runs/")
    assert_error_shape(response, 401)
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize("url", ["/api/configs/validate/", "/api/experiments/"])
def test_a_body_over_the_limit_is_a_json_413_before_it_is_read(api, url):
    response = api.generic("POST", url, b"[" * (LIMIT + 1), content_type="application/json")
    (error,) = assert_error_shape(response, 413)
    assert error == {"field": "", "message": f"request body is larger than {LIMIT} bytes"}


def test_a_body_at_the_limit_is_read(api):
    body = b'{"config": "' + b"a" * (LIMIT - 14) + b'"}'
    assert len(body) == LIMIT
    response = api.generic("POST", "/api/configs/validate/", body, content_type="application/json")
    assert response.status_code == 400  # read and validated (the text is no config), not refused unread
    assert "config" in response.json()


def test_the_editor_check_answers_413_as_json_and_pages_as_text(alice):
    client = Client()
    client.force_login(alice)
    big = {"editor_mode": "yaml", "config_yaml": "a" * (LIMIT + 1)}
    check = client.post("/editor/check/", big, headers={"X-Requested-With": "fetch"})
    assert_error_shape(check, 413)
    page = client.post("/projects/new/", {"name": "x" * (LIMIT + 1)})
    assert page.status_code == 413 and page["Content-Type"].startswith("text/plain")


def test_html_404_is_a_plain_page_without_the_url_map(alice, settings):
    settings.DEBUG = False
    client = Client()
    client.force_login(alice)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Not found" in html and "URLconf" not in html and "policylab.urls" not in html


def test_html_500_is_a_plain_page_without_a_traceback(alice, settings, monkeypatch):
    settings.DEBUG = False

    def broken(user):
        raise RuntimeError(SECRET_DETAIL)

    monkeypatch.setattr(selectors, "projects_for", broken)
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong" in html and SECRET_DETAIL not in html and "Traceback" not in html
