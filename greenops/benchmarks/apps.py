from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "greenops.benchmarks"
    label = "benchmarks"
