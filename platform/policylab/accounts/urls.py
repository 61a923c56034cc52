from django.contrib.auth import views as auth_views
from django.urls import path

from policylab.accounts import views

app_name = "accounts"

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="accounts/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token_revoke"),
    path("secrets/", views.secrets, name="secrets"),
    path("secrets/<int:team_id>/<str:name>/delete/", views.secret_delete, name="secret_delete"),
]
