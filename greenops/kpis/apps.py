from django.apps import AppConfig


class KpisConfig(AppConfig):
    name = "greenops.kpis"
    label = "kpis"
