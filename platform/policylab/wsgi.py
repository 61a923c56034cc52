"""WSGI entry point (plain HTTP; the ASGI application in asgi.py also serves websockets)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
application = get_wsgi_application()
