from django.urls import path

from policylab.experiments import views

app_name = "experiments"

urlpatterns = [
    path("", views.home, name="home"),
    path("projects/new/", views.project_new, name="project_new"),
    path("projects/<int:pk>/", views.project_detail, name="project_detail"),
    path("projects/<int:pk>/experiments/new/", views.experiment_new, name="experiment_new"),
    path("editor/check/", views.editor_check, name="editor_check"),
    path("experiments/<int:pk>/", views.experiment_detail, name="experiment_detail"),
    path("experiments/<int:pk>/launch/", views.experiment_launch, name="experiment_launch"),
    # /runs/<pk>/ is the tracking app's live dashboard; these are the simple page and the actions.
    path("runs/<int:pk>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<int:pk>/resume/", views.run_resume, name="run_resume"),
    path("runs/<int:pk>/fork/", views.run_fork, name="run_fork"),
]
