from django.apps import AppConfig


class KpisConfig(AppConfig):
    name = "greenops.kpis"
    label = "kpis"

    def ready(self) -> None:
        # Connects the job_stopped receiver; job_accounting imports models, so not before now.
        from greenops.kpis import job_accounting  # noqa: F401
