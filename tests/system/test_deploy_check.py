"""`manage.py check --deploy` is clean with production settings (GREENOPS_HTTPS=true), and the
demo's plain-HTTP defaults keep cookies usable on http://localhost."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def _check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    # Browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for the session; check --deploy would warn.
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SECURE_", "GREENOPS_", "DATABASE_URL", "DEBUG", "DJANGO_"))}
    base.update({"GREENOPS_DATA_DIR": str(tmp_path), "SECRET_KEY": secrets.token_urlsafe(50),
                 "ALLOWED_HOSTS": "greenops.example.com", **env})
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level",
                           "WARNING"], cwd=ROOT, env=base, capture_output=True, text=True,
                          timeout=120)


def test_check_deploy_is_clean_over_https(tmp_path):
    result = _check(tmp_path, GREENOPS_HTTPS="true",
                    SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https")
    assert result.returncode == 0, result.stdout + result.stderr


def test_plain_http_default_names_what_https_would_fix(tmp_path):
    result = _check(tmp_path)
    assert result.returncode != 0
    for code in ("W004", "W008", "W012", "W016"):
        assert code in result.stderr + result.stdout


def test_https_settings(settings):
    # The test settings are the demo's: plain HTTP, so the login cookie works on localhost.
    assert settings.SESSION_COOKIE_SECURE is False
    assert settings.SECURE_PROXY_SSL_HEADER is None
