from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "greenops.teams"
    label = "teams"
