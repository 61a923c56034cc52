"""ASGI entry point: Django for HTTP, Channels for the websockets of live run pages."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
django_asgi_app = get_asgi_application()  # set up Django before importing consumers

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from policylab.accounts.websocket import WebsocketAuth  # noqa: E402
from policylab.tracking.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # an API token (scripts), else the session from an allowed Origin (browsers): accounts/websocket.py
        "websocket": WebsocketAuth(URLRouter(websocket_urlpatterns)),
    }
)
