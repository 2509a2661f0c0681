from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "greenops.telemetry"
    label = "telemetry"

    def ready(self) -> None:
        from django.core import checks

        from greenops.telemetry.partitions import check_settings

        checks.register(check_settings)
