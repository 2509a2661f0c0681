"""What a process loads before it answers: every web process, Celery worker and manage.py
command imports the URLconf, so a heavy library imported at the top of a module it reaches is
paid at every start. scipy.stats (the forecast's t quantile) cost ~1.2 s and reportlab with
fontTools (the PDF writer) ~0.35 s on a 2-core machine; both load where they are used."""

from __future__ import annotations

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

