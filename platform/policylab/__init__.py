"""PolicyLab's Django project: settings, URL map, ASGI/WSGI entry points and the web apps."""
