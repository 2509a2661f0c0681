from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "greenops.alerts"
    label = "alerts"
    verbose_name = "KPI alerts"
