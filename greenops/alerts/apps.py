from django.apps import AppConfig
from django.core import checks


class AlertsConfig(AppConfig):
    name = "greenops.alerts"
    label = "alerts"
    verbose_name = "KPI alerts"

    def ready(self) -> None:
        from greenops.alerts import checks as alert_checks  # it reads models: apps are ready now

        checks.register(alert_checks.links, "alerts")
