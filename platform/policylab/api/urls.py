from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from policylab.api import tracking_views, views
from policylab.api.permissions import SchemaReaders

app_name = "api"

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(permission_classes=[SchemaReaders]), name="schema"),
    # the split view serves its start-up script as a file: the CSP allows no inline scripts
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema", permission_classes=[SchemaReaders]),
         name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema", permission_classes=[SchemaReaders]),
         name="redoc"),
    path("projects/", views.ProjectList.as_view(), name="project-list"),
    path("experiments/", views.ExperimentList.as_view(), name="experiment-list"),
    path("experiments/<int:pk>/", views.ExperimentDetail.as_view(), name="experiment-detail"),
    path("experiments/<int:pk>/runs/", views.ExperimentRuns.as_view(), name="experiment-runs"),
    path("runs/", views.RunList.as_view(), name="run-list"),
    path("runs/<int:pk>/", views.RunDetail.as_view(), name="run-detail"),
    path("runs/<int:pk>/cancel/", views.RunCancel.as_view(), name="run-cancel"),
    path("runs/<int:pk>/resume/", views.RunResume.as_view(), name="run-resume"),
    path("runs/<int:pk>/fork/", views.RunFork.as_view(), name="run-fork"),
    path("config-schema/", views.ConfigSchema.as_view(), name="config-schema"),
    path("configs/validate/", views.ConfigValidate.as_view(), name="config-validate"),
    path("tokens/", views.TokenList.as_view(), name="token-list"),
    path("tokens/<int:pk>/", views.TokenDetail.as_view(), name="token-detail"),
    path("teams/<int:team_id>/secrets/", views.TeamSecretList.as_view(), name="team-secret-list"),
    path("teams/<int:team_id>/secrets/<str:name>/", views.TeamSecretDetail.as_view(), name="team-secret-detail"),
]

# The REST endpoints of a run's tracking data. policylab.urls serves them beside tracking's pages, in the
# `tracking` namespace: pages, scripts and clients name them "tracking:api-metrics" and so on.
tracking_urlpatterns = [
    path("api/runs/<int:run_id>/metrics/", tracking_views.RunMetrics.as_view(), name="api-metrics"),
    path("api/runs/<int:run_id>/rollouts/", tracking_views.RunRollouts.as_view(), name="api-rollouts"),
    path("api/runs/<int:run_id>/rollouts/by-prompt/", tracking_views.RunPromptHistory.as_view(),
         name="api-prompt-history"),
    path("api/rollouts/<int:sample_id>/", tracking_views.RolloutSampleDetail.as_view(), name="api-rollout-sample"),
    path("api/runs/<int:run_id>/metrics/export/", tracking_views.RunMetricsExport.as_view(), name="api-metrics-export"),
    path("api/runs/<int:run_id>/checkpoints/", tracking_views.RunCheckpoints.as_view(), name="api-checkpoints"),
    path("api/runs/<int:run_id>/logs/", tracking_views.RunLogs.as_view(), name="api-logs"),
    path("api/runs/<int:run_id>/alerts/", tracking_views.RunAlerts.as_view(), name="api-alerts"),
    path("api/runs/<int:run_id>/events/", tracking_views.RunEvents.as_view(), name="api-events"),
    path("api/chart-pins/", tracking_views.ChartPins.as_view(), name="api-chart-pins"),
]
