"""What a process loads before it answers: every web process, Celery worker and manage.py
command imports the URLconf, so a heavy library imported at the top of a module it reaches is
paid at every start. scipy.stats (the forecast's t quantile) cost ~1.2 s and reportlab with
fontTools (the PDF writer) ~0.35 s on a 2-core machine; both load where they are used."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.support import ROOT

HEAVY = ("scipy", "reportlab", "fontTools")

PROBE = f"""
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")
import django
django.setup()
import greenops.urls
from greenops.celery import app
app.loader.import_default_modules()  # what a worker imports at start: every app's tasks
assert "greenops.reports.tasks" in sys.modules
print(",".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))))
"""


def test_the_urlconf_and_the_tasks_load_no_heavy_library():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"loaded at start: {out.stdout.strip()}"



WEB_PROBE = """
import os, socket, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "greenops.settings")
connected = []
real_connect = socket.socket.connect
def watch(self, address):  # every connection the import would open
    connected.append(address)
    return real_connect(self, address)
socket.socket.connect = watch
import greenops.wsgi
socket.socket.connect = real_connect
from greenops.celery import app
finalized = app.finalized
from greenops.telemetry import ingest, tasks
loaded = set(sys.modules)
ingest._enqueue(tasks.store_batch, "00000000-0000-0000-0000-000000000000")
lazy = sorted(m for m in set(sys.modules) - loaded if m.split(".")[0] in ("celery", "kombu"))
app.control.purge()
print(repr((connected, finalized, lazy)))
"""


def test_a_web_process_is_ready_to_publish_before_its_first_request(tmp_path):
    """greenops.wsgi finalises Celery's app and imports the broker's transport at start (no
    connection: a broker that is down must not stop the web starting), so the agent POST that
    queues a process's first store task does not pay for them: 30-48 ms of CPU, paid once per
    thread when several published at once."""
    env = {**os.environ, "REDIS_URL": "redis://127.0.0.1:6379/12",
           "CELERY_TASK_ALWAYS_EAGER": "", "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3"}
    out = subprocess.run([sys.executable, "-c", WEB_PROBE], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    connected, finalized, lazy = ast.literal_eval(out.stdout.strip())
    assert connected == []  # importing the web application connected to nothing
    assert finalized  # every task bound before the first request
    assert lazy == []  # the first publish imported nothing more of Celery or kombu
