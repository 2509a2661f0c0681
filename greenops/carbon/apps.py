from django.apps import AppConfig


class CarbonConfig(AppConfig):
    name = "greenops.carbon"
    label = "carbon"
    verbose_name = "Carbon accounting"
