"""The embedded default (SQLite, in-process tasks) in a subprocess: its environment, and a
database file migrated once (the `sqlite_migrated` fixture in tests/conftest.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DB_FILE = "greenops.sqlite3"  # settings: sqlite:///<GREENOPS_DATA_DIR>/greenops.sqlite3


def embedded_env(tmp_path, migrated: Path | None = None) -> dict:
    """The environment of the embedded default with its data in tmp_path. With `migrated` (the
    `sqlite_migrated` fixture's file), tmp_path starts with a copy of that migrated database:
    `migrate` then has nothing left to apply, which saves each test the ~20 s it takes."""
    if migrated is not None:
        for f in migrated.parent.glob(DB_FILE + "*"):  # with its -wal, if one was left
            shutil.copy(f, Path(tmp_path) / f.name)
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env.update(GREENOPS_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="greenops.settings")
    return env
