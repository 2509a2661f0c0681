from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "greenops.alerts"
    label = "alerts"
    verbose_name = "KPI alerts"

    def ready(self) -> None:
        from django.core import checks

        from greenops.alerts import checks as alert_checks

        checks.register(alert_checks.links, "alerts")
