from django.apps import AppConfig


class AdvisorConfig(AppConfig):
    name = "greenops.advisor"
    label = "advisor"
    verbose_name = "Efficiency advisor"
