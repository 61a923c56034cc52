from django.urls import path

from policylab.tracking import api, views

app_name = "tracking"

urlpatterns = [
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/rollouts/", views.rollouts, name="rollouts"),
    path("rollouts/<int:sample_id>/frames/", views.rollout_frames, name="rollout_frames"),
    path("runs/<int:run_id>/log/", views.full_log, name="full_log"),
    path("history/", views.history, name="history"),
    path("history/csv/", views.history_csv, name="history_csv"),
    path("compare/", views.compare, name="compare"),
    path("api/runs/<int:run_id>/metrics/", api.RunMetrics.as_view(), name="api-metrics"),
    path("api/runs/<int:run_id>/rollouts/", api.RunRollouts.as_view(), name="api-rollouts"),
    path("api/runs/<int:run_id>/metrics/export/", api.RunMetricsExport.as_view(), name="api-metrics-export"),
    path("api/runs/<int:run_id>/checkpoints/", api.RunCheckpoints.as_view(), name="api-checkpoints"),
    path("api/runs/<int:run_id>/logs/", api.RunLogs.as_view(), name="api-logs"),
    path("api/runs/<int:run_id>/events/", api.RunEvents.as_view(), name="api-events"),
    path("api/chart-pins/", api.ChartPins.as_view(), name="api-chart-pins"),
]
