from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "greenops.telemetry"
    label = "telemetry"
