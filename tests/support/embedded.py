"""The embedded default (SQLite, in-process tasks) in a subprocess: its environment."""

from __future__ import annotations

import os


def embedded_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env.update(GREENOPS_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="greenops.settings")
    return env
