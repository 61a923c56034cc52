"""The URL map. /runs/<run_id>/, history and compare pages belong to the tracking app; every REST endpoint
(under /api/) to the api app."""

from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path

from policylab.api.urls import tracking_urlpatterns as tracking_api
from policylab.tracking import urls as tracking_urls


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Every page links its icon (base.html); what asks for /favicon.ico anyway (a JSON response shown in
    a browser, the API docs) gets the same file instead of a 404."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon),
    path("accounts/", include("policylab.accounts.urls")),
    path("api/", include("policylab.api.urls")),
    path("", include("policylab.experiments.urls")),
    # tracking's pages and the REST endpoints of its data (served by the api app) in one namespace, "tracking"
    path("", include((tracking_urls.urlpatterns + tracking_api, tracking_urls.app_name))),
]
