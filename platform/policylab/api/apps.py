from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "policylab.api"
    label = "api"
    verbose_name = "REST API"
