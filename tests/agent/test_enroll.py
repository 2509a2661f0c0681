"""A real agent process enrolls against the live server, then runs and ships samples.

`python -m collectors.cli enroll` trades the token (GPUs from the fake NVML, instance facts from a
local fake of the AWS metadata service, never 169.254.169.254), writes its config file with mode
0600; `run` reads it and the samples arrive; `status` and `doctor` see the server and the token.
"""

from __future__ import annotations

import http.server
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from greenops.telemetry import enrollment
from greenops.telemetry.models import GpuSample, Host
from tests.support import ROOT


class FakeImds(http.server.BaseHTTPRequestHandler):
    """IMDSv2: a session token from PUT, then metadata only with that token."""

    def do_PUT(self):  # noqa: N802
        ok = self.path == "/latest/api/token" and \
            self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        self._reply(200 if ok else 400, "imds-session")

    def do_GET(self):  # noqa: N802
        if self.headers.get("X-aws-ec2-metadata-token") != "imds-session":
            return self._reply(401, "")
        values = {"/latest/meta-data/instance-type": "p4d.24xlarge",
                  "/latest/meta-data/placement/region": "eu-west-1"}
        return self._reply(200 if self.path in values else 404, values.get(self.path, ""))

    def _reply(self, status: int, text: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def imds():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeImds)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def agent_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENOPS_")}
    env["AGENT_FAKES_GPUS"] = "2"
    env["HOME"] = env.get("HOME", "/tmp")
    return env


def agent(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "collectors.cli", *args], cwd=ROOT,
                          env=agent_env(), capture_output=True, text=True, timeout=timeout)


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def enroll(server: str, token: str, config: Path, *extra: str) -> subprocess.CompletedProcess:
    return agent("enroll", "--server", server, "--token", token, "--config", str(config),
                 "--nvml-lib", "tests.support.agent_fakes", *extra)


@pytest.mark.django_db(transaction=True)
def test_enroll_run_status_doctor_revoke(live_server, team, users, imds, tmp_path):
    _row, token = enrollment.issue_enrollment_token(team, users["owner"])
    config = tmp_path / "etc" / "agent.toml"
    proc = enroll(live_server.url, token, config, "--name", "node-7", "--metadata-url", imds)
    assert proc.returncode == 0, proc.stderr
    assert "enrolled as host node-7" in proc.stdout

    # The host token is on disk for its owner only, and the server kept only its hash.
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    written = tomllib.loads(config.read_text())
    assert written["server"] == live_server.url and written["token"].startswith("gho_")
    assert written["nvml_lib"] == "tests.support.agent_fakes"
    host = Host.objects.get(team=team, name="node-7")
    assert (host.instance_type, host.region, host.provider, host.facts_source) == (
        "p4d.24xlarge", "eu-west-1", "aws", "aws-imds")
    assert host.gpus.count() == 2 and host.cpu_model

    # The same enrollment token a second time: one clear line, exit 2, nothing written.
    again = enroll(live_server.url, token, tmp_path / "other.toml", "--metadata-url", "off")
    assert again.returncode == 2
    assert again.stderr.strip().startswith("greenops-agent: enrollment refused: this "
                                           "enrollment token was already used")
    assert len(again.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "other.toml").exists()

    # `run` needs nothing but the config file enroll wrote.
    run = subprocess.Popen(
        [sys.executable, "-m", "collectors.cli", "run", "--config", str(config), "--spool",
         str(tmp_path / "spool.db"), "--interval", "0.05", "--batch-seconds", "0.2"],
        cwd=ROOT, env=agent_env(), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: GpuSample.objects.filter(gpu__host=host).count() >= 4)
        wait_for(lambda: Host.objects.get(id=host.id).spool_depth is not None)
    finally:
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=20)
    assert run.returncode == 0, stderr
    host.refresh_from_db()
    assert host.is_online() and host.agent_version == "0.1.0"
    assert host.spool_depth >= 1  # the batch being sent counts itself

    status = agent("status", "--config", str(config), "--spool", str(tmp_path / "spool.db"))
    assert status.returncode == 0, status.stderr
    assert f"server:          {live_server.url} reachable" in status.stdout
    assert "token:           accepted (host node-7)" in status.stdout
    assert "last ack:        never" not in status.stdout

    doctor = agent("doctor", "--config", str(config))
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "[  ok] token: accepted: host node-7" in doctor.stdout
    assert "[  ok] clock skew:" in doctor.stdout
    assert "[  ok] gpu 0:" in doctor.stdout

    enrollment.revoke(host, users["owner"])
    status = agent("status", "--config", str(config), "--spool", str(tmp_path / "spool.db"))
    assert "token:           REJECTED" in status.stdout
    doctor = agent("doctor", "--config", str(config))
    assert doctor.returncode == 1
    assert "[FAIL] token: rejected by the server" in doctor.stdout


@pytest.mark.django_db(transaction=True)
def test_enroll_failures_are_one_line(live_server, team, users, tmp_path):
    _row, token = enrollment.issue_enrollment_token(team, users["owner"])
    config = tmp_path / "agent.toml"
    cases = [
        (("--server", "greenops.example", "--token", token),
         "server URL must start with http:// or https://"),
        (("--server", "http://127.0.0.1:9", "--token", token),
         "cannot reach the GreenOps server at http://127.0.0.1:9"),
        (("--server", live_server.url + "/nothing-here", "--token", token),
         "has no /api/v1/enroll (HTTP 404)"),
        (("--server", live_server.url, "--token", "gen_typo"),
         "enrollment refused: unknown enrollment token"),
    ]
    for args, message in cases:
        proc = agent("enroll", *args, "--config", str(config),
                     "--nvml-lib", "tests.support.agent_fakes",
                     "--metadata-url", "off")
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, proc.stderr)
    assert not config.exists()
    # A failed attempt does not spend the token.
    ok = agent("enroll", "--server", live_server.url, "--token", token, "--config", str(config),
               "--simulate", "2", "--metadata-url", "off", "--region", "us-west-2")
    assert ok.returncode == 0, ok.stderr
    host = Host.objects.get(team=team)
    assert (host.region, host.facts_source, host.gpus.count()) == ("us-west-2", "config", 2)
    assert tomllib.loads(config.read_text())["simulate"] == 2


def test_unreadable_config_is_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    config = tmp_path / "agent.toml"
    config.write_text('server = "http://127.0.0.1:9"\ntoken = "gho_x"\n')
    config.chmod(0)
    proc = agent("run", "--config", str(config), "--simulate", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"greenops-agent: cannot read config file {config}: "
                                   "Permission denied")


def test_config_that_is_not_a_file_is_one_line(tmp_path):
    proc = agent("run", "--config", str(tmp_path), "--simulate", "1")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [f"greenops-agent: cannot read config file {tmp_path}: Is a directory"]


def test_version():
    proc = agent("version")
    assert proc.returncode == 0 and proc.stdout.strip() == "greenops-agent 0.1.0"


@pytest.mark.django_db(transaction=True)
def test_unwritable_config_fails_before_the_token_is_spent(live_server, team, users, tmp_path):
    """A config path that cannot be written is found before the server is asked, so the token
    still works for the next try; and the message is one line, not a NotADirectoryError
    traceback from cleaning up the temporary file."""
    from greenops.telemetry.models import EnrollmentToken

    row, token = enrollment.issue_enrollment_token(team, users["owner"])
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be\n")
    for config in (blocker / "agent.toml", blocker / "sub" / "agent.toml", tmp_path):
        proc = enroll(live_server.url, token, config, "--metadata-url", "off")
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"greenops-agent: cannot write {config}"), \
            proc.stderr
        row.refresh_from_db()
        assert row.used_at is None and not Host.objects.exists()
    ok = enroll(live_server.url, token, tmp_path / "agent.toml", "--metadata-url", "off")
    assert ok.returncode == 0, ok.stderr
    assert EnrollmentToken.objects.get(id=row.id).used_at is not None


@pytest.mark.django_db(transaction=True)
def test_status_right_after_enroll_checks_the_server(live_server, team, users, tmp_path):
    _row, token = enrollment.issue_enrollment_token(team, users["owner"])
    config = tmp_path / "agent.toml"
    assert enroll(live_server.url, token, config, "--name", "fresh", "--metadata-url",
                  "off").returncode == 0
    spool = tmp_path / "state" / "spool.db"  # `run` has not created it yet
    status = agent("status", "--config", str(config), "--spool", str(spool))
    assert status.returncode == 0, status.stderr
    assert "no batches sent yet" in status.stdout
    assert f"server:          {live_server.url} reachable" in status.stdout
    assert "token:           accepted (host fresh)" in status.stdout
    assert not spool.exists()  # status only looks; it does not create the spool

    Host.objects.filter(name="fresh").update(token_hash="x" * 64)  # as if revoked
    status = agent("status", "--config", str(config), "--spool", str(spool))
    assert "token:           REJECTED" in status.stdout


def test_status_without_spool_or_server_says_so(tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text('server = "http://127.0.0.1:9"\ntoken = "gho_x"\n')
    status = agent("status", "--config", str(config), "--spool", str(tmp_path / "s.db"))
    assert status.returncode == 0, status.stderr
    assert "no batches sent yet" in status.stdout
    assert "server:          http://127.0.0.1:9 unreachable" in status.stdout


def test_status_tells_a_server_error_from_a_refused_token():
    # A server whose database is down answers /time (no database) but 500 on whoami.
    from collectors.cli_host import token_line
    from collectors.probe import Answer

    def answer(status, doc):
        return Answer(status, doc, "", 0.01, 0.0)

    assert token_line(answer(200, {"host": "n1"})) == "token:           accepted (host n1)"
    assert "REJECTED" in token_line(answer(401, {"message": "unknown or revoked host token"}))
    assert "REJECTED" in token_line(answer(403, {"message": "forbidden"}))
    line = token_line(answer(500, {"error": "server_error", "message": "database unavailable"}))
    assert "REJECTED" not in line
    assert line == ("token:           not checked (server error HTTP 500: database unavailable)")
    line = token_line(Answer(None, None, "timed out", 3.0, 0.0))
    assert line == "token:           not checked (no answer: timed out)"
