"""ASGI entry point: Django for HTTP, Channels for the websockets of live run pages.

HTTP requests pass ClientGone (work for a client that disconnected can stop: query_budget) and
BodySizeLimit (413 past DATA_UPLOAD_MAX_MEMORY_SIZE, chunked bodies included); daphne itself is made to
count body bytes as they arrive (bodylimit.cap_daphne_request_bodies), since it reads a whole body
before the application starts. A websocket to a path with no route is closed with 4404 (the handshake
is refused), never a server error.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
django_asgi_app = get_asgi_application()  # set up Django before importing consumers

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from policylab.accounts.websocket import WebsocketAuth  # noqa: E402
from policylab.bodylimit import BodySizeLimit, cap_daphne_request_bodies  # noqa: E402
from policylab.query_budget import ClientGone  # noqa: E402
from policylab.tracking.routing import websocket_urlpatterns  # noqa: E402

CLOSE_NO_ROUTE = 4404

cap_daphne_request_bodies()


async def no_such_websocket(scope, receive, send) -> None:
    """The last websocket route: any other path is refused with a clean close (daphne answers the handshake
    403), instead of Channels' "No route found" exception, a 500 and a traceback in the log."""
    await receive()  # websocket.connect
    await send({"type": "websocket.close", "code": CLOSE_NO_ROUTE})


application = ProtocolTypeRouter(
    {
        "http": ClientGone(BodySizeLimit(django_asgi_app)),
        # an API token (scripts), else the session from an allowed Origin (browsers): accounts/websocket.py
        "websocket": WebsocketAuth(URLRouter([*websocket_urlpatterns, re_path(r"", no_such_websocket)])),
    }
)
