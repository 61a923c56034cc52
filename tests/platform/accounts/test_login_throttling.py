"""Sign-in throttling (django-axes): repeated wrong passwords lock one username from one address out,
with a clear page; nothing else is locked, and API tokens keep working."""

from __future__ import annotations

import pytest
from django.test import Client

from policylab.accounts.services import create_api_token

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
PASSWORD = "pw-alice-123456"  # tests/platform/conftest.make_member


def sign_in(client: Client, password: str, username: str = "alice"):
    return client.post(LOGIN, {"username": username, "password": password})


def test_forty_wrong_passwords_then_the_right_one_is_refused(alice):
    client = Client(REMOTE_ADDR="203.0.113.7")
    answers = [sign_in(client, f"wrong-{i}").status_code for i in range(40)]
    assert answers[:9] == [200] * 9  # the form again, "did not match"
    assert set(answers[9:]) == {429}  # the 10th failure locks the pair out
    right = sign_in(client, PASSWORD)
    assert right.status_code == 429
    assert "_auth_user_id" not in client.session
    page = right.content.decode()
    assert "Too many sign-in attempts" in page and "15 minutes" in page and "10 failed attempts" in page


def test_the_lock_is_per_username_and_address(alice, bob):
    attacker = Client(REMOTE_ADDR="203.0.113.7")
    for i in range(12):
        sign_in(attacker, f"wrong-{i}")
    assert sign_in(attacker, PASSWORD).status_code == 429
    # alice from her own address, and another user from the attacker's, still sign in
    assert sign_in(Client(REMOTE_ADDR="198.51.100.2"), PASSWORD).status_code == 302
    assert sign_in(Client(REMOTE_ADDR="203.0.113.7"), "pw-bob-123456", username="bob").status_code == 302


def test_a_successful_sign_in_clears_the_count(alice):
    client = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(3):
        for i in range(9):
            assert sign_in(client, f"wrong-{i}").status_code == 200
        assert sign_in(client, PASSWORD).status_code == 302
        client.logout()


def test_api_tokens_of_a_locked_out_user_keep_working(alice, team_a):
    client = Client(REMOTE_ADDR="203.0.113.7")
    for i in range(11):
        sign_in(client, f"wrong-{i}")
    secret = create_api_token(alice, team_a, "cli").secret
    response = Client(REMOTE_ADDR="203.0.113.7", HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/runs/")
    assert response.status_code == 200


def test_programmatic_authentication_still_works(alice):
    """Django's test client `login()` authenticates without a request; axes alone would raise."""
    assert Client().login(username="alice", password=PASSWORD)
    assert not Client().login(username="alice", password="wrong")
