"""tracking's pages. The REST endpoints of a run's tracking data live in the api app (api.urls.tracking_urlpatterns);
policylab.urls serves both in this namespace, so both are named "tracking:…"."""

from django.urls import path

from policylab.tracking import views

app_name = "tracking"

urlpatterns = [
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/rollouts/", views.rollouts, name="rollouts"),
    path("rollouts/<int:sample_id>/frames/", views.rollout_frames, name="rollout_frames"),
    path("runs/<int:run_id>/log/", views.full_log, name="full_log"),
    path("runs/<int:run_id>/profiles/<int:profile_id>/", views.profile_download, name="profile_download"),
    path("history/", views.history, name="history"),
    path("history/csv/", views.history_csv, name="history_csv"),
    path("compare/", views.compare, name="compare"),
]
