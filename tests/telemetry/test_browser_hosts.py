"""An admin adds a host in the browser and sees it come online.

The install command is read off the Add host page and carried out as a GPU host would: pip
installs the agent wheel the live server builds (offline, --no-deps: the fake NVML stands in for
nvidia-ml-py), the installed `greenops-agent` console script enrolls with the page's token and
runs; the host list then shows the host online with its agent version and GPUs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support import ROOT
from tests.support.browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_add_host_and_see_it_come_online(live_server, page, users, team,  # noqa: F811
                                         tmp_path):
    log_in(page, live_server.url, "owner", "pw-owner")
    page.goto(f"{live_server.url}/teams/{team.slug}/")
    page.get_by_role("link", name="Hosts", exact=True).click()
    page.get_by_text("No hosts yet").wait_for()
    page.get_by_role("link", name="Add host").click()
    page.get_by_role("button", name="Get install command").click()
    command = page.locator("#install-command").inner_text()

    wheel_url = re.search(r'pip install -q "([^"]+)"', command)[1]
    server, token = re.search(r"greenops-agent enroll --server (\S+) --token (\S+)",
                              command).groups()
    assert server == live_server.url and wheel_url.startswith(live_server.url + "/downloads/")

    site = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--no-index", "--target", str(site), wheel_url],
                         capture_output=True, text=True, timeout=120)
    assert pip.returncode == 0, pip.stderr
    script = site / "bin" / "greenops-agent"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    # The installed package first; the repository only for tests.support.agent_fakes.
    env.update(PYTHONPATH=f"{site}{os.pathsep}{ROOT}", AGENT_FAKES_GPUS="2")
    config = tmp_path / "agent.toml"
    enroll = subprocess.run(
        [str(script), "enroll", "--server", server, "--token", token, "--config", str(config),
         "--nvml-lib", "tests.support.agent_fakes", "--metadata-url", "off",
         "--name", "browser-node"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert enroll.returncode == 0, enroll.stderr

    page.goto(f"{live_server.url}/teams/{team.slug}/hosts/")
    row = page.locator('tr[data-host="browser-node"]')
    # Enrolled with its GPUs registered, but offline until the agent runs.
    assert "2 × Fake NVIDIA A100" in row.inner_text()
    assert row.locator(".status.offline").count() == 1

    run = subprocess.Popen(
        [str(script), "run", "--config", str(config), "--spool", str(tmp_path / "spool.db"),
         "--interval", "0.05", "--batch-seconds", "0.2"],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        # Online once the agent registers; the spool column fills with its first batch.
        while not (row.locator(".status.online").count() and "batch" in row.inner_text()):
            assert time.monotonic() < deadline, "host never came online with a batch"
            time.sleep(0.5)
            page.reload()
        assert re.search(r"online\s+0\.1\.0\s+2 × Fake NVIDIA", row.inner_text())
    finally:
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=20)
    assert run.returncode == 0
