from django.urls import path

from policylab.tracking import api, views

app_name = "tracking"

urlpatterns = [
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/rollouts/", views.rollouts, name="rollouts"),
    path("history/", views.history, name="history"),
    path("compare/", views.compare, name="compare"),
    path("api/runs/<int:run_id>/metrics/", api.RunMetrics.as_view(), name="api-metrics"),
    path("api/runs/<int:run_id>/rollouts/", api.RunRollouts.as_view(), name="api-rollouts"),
]
