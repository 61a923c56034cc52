from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "policylab.accounts"
    label = "accounts"
    verbose_name = "Accounts and teams"
