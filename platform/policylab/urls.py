"""The URL map. /runs/<run_id>/, history and compare pages belong to the tracking app."""

from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Every page links its icon (base.html); what asks for /favicon.ico anyway (a JSON response shown in
    a browser, the API docs) gets the same file instead of a 404."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon),
    path("accounts/", include("policylab.accounts.urls")),
    path("api/", include("policylab.api.urls")),
    path("", include("policylab.experiments.urls")),
    path("", include("policylab.tracking.urls")),
]
