"""The site has an icon: every page links it, /favicon.ico (which browsers ask for on their own) answers with
it instead of a 404, and the file itself is served (as an image the CSP allows: img-src 'self')."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string
from django.test import Client

pytestmark = pytest.mark.django_db
ICON_LINK = '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'


def test_favicon_ico_is_no_404_and_leads_to_the_icon() -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 301  # before: 404 on every page load
    assert response["Location"] == "/static/favicon.svg"
    icon = Client().get(response["Location"])
    assert icon.status_code == 200 and icon["Content-Type"].startswith("image/svg+xml")
    body = b"".join(icon.streaming_content) if icon.streaming else icon.content
    assert body.lstrip().startswith(b"<svg")


@pytest.mark.parametrize("url", ["/accounts/login/", "/", "/history/", "/no/such/page/"])
def test_every_page_links_the_icon(alice, url) -> None:
    client = Client()
    client.force_login(alice)
    assert ICON_LINK in client.get(url).content.decode()


def test_the_server_error_page_links_it_too() -> None:
    assert ICON_LINK in render_to_string("500.html")
