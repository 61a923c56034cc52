"""What the experiments tests share: a browser signed in as alice (the team fixtures live in tests/platform)."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture
def browser(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client
