from django.apps import AppConfig
from django.core import checks


class TelemetryConfig(AppConfig):
    name = "greenops.telemetry"
    label = "telemetry"

    def ready(self) -> None:
        # partitions imports this app's models, which need the app registry ready
        from greenops.telemetry.partitions import check_settings

        checks.register(check_settings)
