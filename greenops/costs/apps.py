from django.apps import AppConfig


class CostsConfig(AppConfig):
    name = "greenops.costs"
    label = "costs"
