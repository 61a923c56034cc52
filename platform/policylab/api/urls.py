from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from policylab.api import views
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
]
