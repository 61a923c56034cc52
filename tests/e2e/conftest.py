"""Browser tests: a real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright's sync
API against pytest-django's live server, plus a signed-up user with a team and a project.

Shared by the config-editor and tracking browser tests. The SQLite test database is a file, so the
Celery worker of tests/services.py sees what the live server commits.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make in
# between are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

import django

django.setup()

import pytest  # noqa: E402

from tests.platform.web_stack import TrackingStack, share_channels, start_tracking_stack  # noqa: E402
from tests.services import claim_redis_db, use_file_sqlite_test_database  # noqa: E402

use_file_sqlite_test_database()

CHROMIUM = os.environ.get("POLICYLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


# Module scope: Playwright's sync API keeps an asyncio loop running in this thread while it is open,
# which breaks every later async_to_sync call (Channels tests) in the same session.
@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: `apt-get install -y chromium` (or set POLICYLAB_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium) -> Iterator[object]:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@dataclass
class WebUser:
    username: str
    password: str
    user: object
    team: object
    project: object


@pytest.fixture
def web_user(transactional_db, settings) -> WebUser:
    """A member of team "e2e" with a project "lab"; passwords hashed fast (a test concern, not a feature)."""
    from django.contrib.auth import get_user_model

    from policylab.accounts.models import Membership, Role, Team
    from policylab.experiments.models import Project

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = get_user_model().objects.create_user("erin", password="erin-pass-123456")
    team = Team.objects.create(name="E2E team", slug="e2e")
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    project = Project.objects.create(team=team, name="lab")
    return WebUser("erin", "erin-pass-123456", user, team, project)


@pytest.fixture
def signed_in(page, live_server, web_user) -> object:
    """`page`, signed in as `web_user` through the real sign-in form."""
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", web_user.username)
    page.fill("input[name=password]", web_user.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


@pytest.fixture
def tracking_stack(transactional_db, redis_url: str, settings, tmp_path: Path) -> Iterator[TrackingStack]:
    """The web stack (tests/platform/web_stack.py) on a Redis database of this test's own; the test process
    publishes on its Channels layer too."""
    claimed, release = claim_redis_db(redis_url)
    settings.POLICYLAB_RUNS_DIR = tmp_path / "runs"
    try:
        with start_tracking_stack(claimed, settings.POLICYLAB_RUNS_DIR, tmp_path) as stack:
            share_channels(settings, stack)
            yield stack
    finally:
        release()
