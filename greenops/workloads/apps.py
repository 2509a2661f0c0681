from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "greenops.workloads"
    label = "workloads"
