from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "greenops.demo"
    label = "demo"
