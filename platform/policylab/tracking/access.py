"""Open websockets follow access as it changes: a revoked token, a removed membership, a signed-out session
or a deactivated user closes the sockets that relied on it within seconds (issue 34).

Two ways, either enough on its own:
- on a signal: when a token is revoked, a membership deleted, a user deactivated or signed out, the
  user's sockets (group `access_group(user_id)`) get an `access.changed` message once the change has
  committed, and re-check at once;
- on a timer: every socket re-checks every settings.POLICYLAB_WS_ACCESS_RECHECK_S seconds, which also
  covers changes made where no signal fires (a queryset update, another process's channel layer down).
A socket that may no longer watch its run is closed with 4403: the policy violation, numbered like the
consumers' other codes after the HTTP status (4401, 4404); daphne (autobahn) lets a server send only 1000
or 3000-4999, so WebSocket's own 1008 cannot be used.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from policylab.accounts.models import ApiToken, Membership
from policylab.accounts.websocket import current_user
from policylab.tracking.selectors import run_for_user

log = logging.getLogger(__name__)
CLOSE_ACCESS_REMOVED = 4403


def access_group(user_id: int) -> str:
    """The Channels group of every open socket of the user."""
    return f"access-user-{user_id}"


def may_watch(scope: dict[str, Any], run_id: int) -> bool:
    """Whether the connection of `scope` may still see run `run_id`, read afresh from the database."""
    user = current_user(scope)
    return user is not None and run_for_user(user, run_id) is not None


def notify_access_changed(user_id: int) -> None:
    """Once the current transaction commits, ask the user's open sockets to re-check their access (best
    effort: the sockets' timer re-checks anyway)."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(access_group(user_id), {"type": "access.changed"})
        except Exception:  # a channel layer outage must not fail the revocation that committed
            log.warning("user %s: telling open sockets to re-check access failed", user_id, exc_info=True)

    transaction.on_commit(send)


def membership_deleted(sender: Any, instance: Membership, **kwargs: Any) -> None:
    notify_access_changed(instance.user_id)


def token_saved(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    if instance.revoked_at is not None:
        notify_access_changed(instance.user_id)


def user_saved(sender: Any, instance: Any, **kwargs: Any) -> None:
    if not instance.is_active:
        notify_access_changed(instance.pk)


def signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None and user.pk is not None:
        notify_access_changed(user.pk)


def connect_signals() -> None:
    post_delete.connect(membership_deleted, sender=Membership, dispatch_uid="tracking.access.membership")
    post_save.connect(token_saved, sender=ApiToken, dispatch_uid="tracking.access.token")
    post_save.connect(user_saved, sender=get_user_model(), dispatch_uid="tracking.access.user")
    user_logged_out.connect(signed_out, dispatch_uid="tracking.access.logout")
