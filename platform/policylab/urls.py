"""The URL map. /runs/<run_id>/, history and compare pages belong to the tracking app."""

from django.urls import include, path

urlpatterns = [
    path("accounts/", include("policylab.accounts.urls")),
    path("api/", include("policylab.api.urls")),
    path("", include("policylab.experiments.urls")),
    path("", include("policylab.tracking.urls")),
]
